// SPDX-License-Identifier: MIT
#include "ddprun/worker/checkpoint_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "ddprun/worker/error_file.hpp"
#include "ddprun/worker/process_liveness.hpp"

namespace ddp::worker {
namespace {

constexpr std::string_view kMagic = "DDPRUN-CHECKPOINT 1 ";

std::array<std::uint64_t, 256> make_crc_table() {
  // ECMA-182 polynomial, reflected (as xz and Go's crc64.ECMA).
  constexpr std::uint64_t kPolynomial = 0xC96C5795D7870F42ULL;
  std::array<std::uint64_t, 256> table{};
  for (std::uint64_t i = 0; i < 256; ++i) {
    std::uint64_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) != 0 ? (crc >> 1) ^ kPolynomial : crc >> 1;
    table[i] = crc;
  }
  return table;
}

std::string errno_name(int error) {
  switch (error) {
    case ENOSPC:
      return "ENOSPC";
    case EIO:
      return "EIO";
    case EDQUOT:
      return "EDQUOT";
    case EACCES:
      return "EACCES";
    case EROFS:
      return "EROFS";
    case ENOENT:
      return "ENOENT";
    case EFBIG:
      return "EFBIG";
    default:
      return "errno " + std::to_string(error);
  }
}

[[noreturn]] void throw_write_error(const std::string& path, const std::string& step, int error) {
  throw CheckpointError("cannot write checkpoint " + printable_utf8(path) + ": " + step + ": " +
                        std::strerror(error) + " (" + errno_name(error) + ")");
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself is atomic
  ::fsync(fd);
  ::close(fd);
}

std::optional<int> parse_pid(std::string_view text) {
  int pid = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || pid <= 0) {
    return std::nullopt;
  }
  return pid;
}

}  // namespace

std::uint64_t crc64(std::string_view data, std::uint64_t crc) {
  static const auto kTable = make_crc_table();
  crc = ~crc;
  for (const char c : data) crc = kTable[(crc ^ static_cast<unsigned char>(c)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string encode_checkpoint(const CheckpointHeader& header, std::string_view payload) {
  const nlohmann::json json = {{"run_id", printable_utf8(header.identity.run_id)},
                               {"world_size", header.identity.world_size},
                               {"data", printable_utf8(header.identity.data_fingerprint)},
                               {"model", printable_utf8(header.identity.model_fingerprint)},
                               {"epoch", header.epoch},
                               {"step", header.step}};
  const std::string header_text = json.dump();
  const std::uint64_t crc = crc64(payload, crc64(header_text));
  char crc_hex[17];
  std::snprintf(crc_hex, sizeof crc_hex, "%016llx", static_cast<unsigned long long>(crc));
  std::string out(kMagic);
  out += crc_hex;
  out += " " + std::to_string(header_text.size()) + " " + std::to_string(payload.size()) + "\n";
  out += header_text;
  out.append(payload);
  return out;
}

DecodedCheckpoint decode_checkpoint(std::string bytes, const std::string& what) {
  const std::string name = printable_utf8(what);
  if (bytes.compare(0, kMagic.size(), kMagic) != 0) {
    throw CheckpointError(name + " is not a ddprun checkpoint (no 'DDPRUN-CHECKPOINT 1' header)");
  }
  const auto line_end = bytes.find('\n');
  if (line_end == std::string::npos || line_end > 128) {
    throw CheckpointError(name + " is corrupt: its first line is damaged");
  }
  const std::string line = bytes.substr(kMagic.size(), line_end - kMagic.size());
  unsigned long long stored_crc = 0, header_bytes = 0, payload_bytes = 0;
  char trailing = 0;
  if (std::sscanf(line.c_str(), "%16llx %llu %llu%c", &stored_crc, &header_bytes, &payload_bytes,
                  &trailing) != 3) {
    throw CheckpointError(name + " is corrupt: its first line is damaged");
  }
  const std::size_t body = line_end + 1;
  if (bytes.size() - body != header_bytes + payload_bytes) {
    throw CheckpointError(name + " is corrupt: " + std::to_string(bytes.size() - body) +
                          " bytes after the header line, expected " +
                          std::to_string(header_bytes + payload_bytes) + " (truncated?)");
  }
  const std::string_view header_text(bytes.data() + body, header_bytes);
  const std::string_view payload(bytes.data() + body + header_bytes, payload_bytes);
  const std::uint64_t crc = crc64(payload, crc64(header_text));
  if (crc != stored_crc) {
    char detail[80];
    std::snprintf(detail, sizeof detail, "checksum mismatch (CRC-64 %016llx, recorded %016llx)",
                  static_cast<unsigned long long>(crc), stored_crc);
    throw CheckpointError(name + " is corrupt: " + detail);
  }
  DecodedCheckpoint out;
  try {
    const auto json = nlohmann::json::parse(header_text);
    out.header.identity.run_id = json.at("run_id").get<std::string>();
    out.header.identity.world_size = json.at("world_size").get<int>();
    out.header.identity.data_fingerprint = json.at("data").get<std::string>();
    out.header.identity.model_fingerprint = json.at("model").get<std::string>();
    out.header.epoch = json.at("epoch").get<std::int64_t>();
    out.header.step = json.at("step").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(name + " has an unreadable header: " + e.what());
  }
  out.payload.assign(payload);
  return out;
}

std::optional<std::string> identity_mismatch(const CheckpointIdentity& file,
                                             const CheckpointIdentity& job, bool ignore_run_id) {
  auto differs = [](const std::string& what, const std::string& theirs, const std::string& ours) {
    return what + " '" + printable_utf8(theirs) + "' (this job: '" + printable_utf8(ours) + "')";
  };
  if (!ignore_run_id && file.run_id != job.run_id)
    return differs("run id", file.run_id, job.run_id);
  if (file.world_size != job.world_size) {
    return "world size " + std::to_string(file.world_size) +
           " (this job: " + std::to_string(job.world_size) + ")";
  }
  if (file.data_fingerprint != job.data_fingerprint) {
    return differs("data", file.data_fingerprint, job.data_fingerprint);
  }
  if (file.model_fingerprint != job.model_fingerprint) {
    return differs("model", file.model_fingerprint, job.model_fingerprint);
  }
  return std::nullopt;
}

ResumePlan plan_resume(ResumePolicy policy, int restart_count, const CheckpointProbe& probe,
                       const CheckpointIdentity& job, const std::string& path) {
  using Action = ResumePlan::Action;
  const std::string name = printable_utf8(path);
  if (policy == ResumePolicy::Never) return {Action::Fresh, ""};
  if (policy == ResumePolicy::OnRestart && restart_count == 0) return {Action::Fresh, ""};
  switch (probe.state) {
    case CheckpointProbe::State::Missing:
      return {Action::Fresh, policy == ResumePolicy::Always
                                 ? "no checkpoint at " + name + "; starting from scratch"
                                 : ""};
    case CheckpointProbe::State::Unreadable:
      // Never train over a file that may be this job's progress: the user decides.
      return {Action::Fail, probe.problem +
                                "; not resuming from it (move it away, or pass "
                                "--no-resume to start from scratch and overwrite it)"};
    case CheckpointProbe::State::Valid:
      break;
  }
  const bool any_run = policy == ResumePolicy::Always;
  if (const auto mismatch = identity_mismatch(probe.header.identity, job, any_run)) {
    if (any_run) {
      return {Action::Fail, "--resume: " + name + " does not belong to this job: " + *mismatch};
    }
    return {Action::Fresh, name + " was written by another job (" + *mismatch +
                               "); starting from scratch, it will be overwritten (--resume "
                               "continues another run with the same data and model)"};
  }
  return {Action::Resume, ""};
}

std::optional<std::string> read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw CheckpointError("cannot read checkpoint " + printable_utf8(path) + ": " +
                          std::strerror(errno));
  }
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw CheckpointError("cannot read checkpoint " + printable_utf8(path) + ": " +
                            std::strerror(error));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string temp_file_name(const std::string& path) {
  return path + ".tmp." + this_host_name() + "." + std::to_string(::getpid());
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::filesystem::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) throw_write_error(path, "creating " + target.parent_path().string(), ec.value());
  }
  const std::string tmp = temp_file_name(path);
  // From here every exit removes the temporary file unless the rename consumed it.
  struct RemoveUnlessRenamed {
    const std::string& tmp;
    bool renamed = false;
    ~RemoveUnlessRenamed() {
      if (!renamed) ::unlink(tmp.c_str());
    }
  } guard{tmp};
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(path, "creating " + tmp, errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(fd);
      throw_write_error(path, "writing " + tmp, error);
    }
    done += static_cast<std::size_t>(n);
  }
  // Delayed allocation and write-back errors surface only here (ENOSPC, EIO on NFS and ext4).
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    throw_write_error(path, "fsync of " + tmp, error);
  }
  if (::close(fd) != 0) throw_write_error(path, "closing " + tmp, errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw_write_error(path, "renaming " + tmp, errno);
  guard.renamed = true;
  fsync_directory(target.has_parent_path() ? target.parent_path().string() : ".");
}

int reclaim_stale_temp_files(const std::string& path) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string prefix = target.filename().string() + ".tmp.";
  const std::string host = this_host_name();
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return 0;  // no directory yet: nothing to reclaim
  int removed = 0;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // "<host>.<pid>" or "<pid>"
    const auto dot = rest.rfind('.');
    const std::string writer_host = dot == std::string::npos ? host : rest.substr(0, dot);
    const auto pid = parse_pid(dot == std::string::npos ? rest : rest.substr(dot + 1));
    // Another host's writer cannot be checked from here (a shared filesystem): leave it.
    if (!pid || writer_host != host || !process_is_dead(*pid)) continue;
    if (std::filesystem::remove(entry.path(), ec) && !ec) ++removed;
  }
  return removed;
}

}  // namespace ddp::worker
