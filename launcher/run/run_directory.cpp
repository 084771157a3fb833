// SPDX-License-Identifier: MIT
#include "launcher/run/run_directory.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/exit_codes.hpp"

namespace ddp::launcher {
namespace fs = std::filesystem;

namespace {
Result<std::string> make_temp_dir(const std::string& parent, const std::string& prefix) {
  std::string templ = parent + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {
    return Error{exit_codes::kUsage, fmt::format("--log_dir: cannot create a directory in '{}': {}",
                                                 parent, std::strerror(errno))};
  }
  return std::string(buf.data());
}
}  // namespace

Result<RunDirectory> RunDirectory::create(const std::string& log_dir, const std::string& run_id,
                                          bool will_hold_logs) {
  RunDirectory dir;
  std::string parent = log_dir;
  if (parent.empty()) {
    // An explicit TMPDIR wins; otherwise scratch (error files only) goes to tmpfs when there is
    // one.
    const char* tmp = std::getenv("TMPDIR");
    const bool tmpdir_set = tmp != nullptr && *tmp != '\0';
    std::string where = tmpdir_set ? tmp : "/tmp";
    if (!tmpdir_set && !will_hold_logs && ::access("/dev/shm", W_OK | X_OK) == 0)
      where = "/dev/shm";
    reclaim_dead_scratch(where);
    auto base = make_temp_dir(where, will_hold_logs ? std::string("ddprun_") : owned_name_prefix());
    if (!base) return base.error();
    if (!will_hold_logs) dir.lock_ = DirectoryLock::acquire(*base);
    dir.base_ = *base;
    dir.temporary_ = true;
    parent = *base;
  } else {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) {
      return Error{exit_codes::kUsage,
                   fmt::format("--log_dir: cannot create '{}': {}", parent, ec.message())};
    }
  }
  auto run = make_temp_dir(parent, run_dir_name(run_id) + "_");
  if (!run) return run.error();
  dir.path_ = *run;
  return dir;
}

std::string RunDirectory::attempt_dir(int attempt) const {
  return fmt::format("{}/attempt_{}", path_, attempt);
}

std::string RunDirectory::rank_dir(int attempt, int local_rank) const {
  return fmt::format("{}/{}", attempt_dir(attempt), local_rank);
}

Result<Ok> RunDirectory::create_attempt(int attempt, int nproc) const {
  for (int r = 0; r < nproc; ++r) {
    std::error_code ec;
    fs::create_directories(rank_dir(attempt, r), ec);
    if (ec) {
      return Error{exit_codes::kUsage, fmt::format("--log_dir: cannot create '{}': {}",
                                                   rank_dir(attempt, r), ec.message())};
    }
  }
  return Ok{};
}

void RunDirectory::remove_if_temporary() const {
  if (!temporary_ || base_.empty()) return;
  std::error_code ec;
  fs::remove_all(base_, ec);
}

std::vector<std::string> reclaim_dead_scratch(const std::string& parent) {
  std::vector<std::string> removed;
  for (const auto& path : abandoned_entries(parent)) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (!ec) removed.push_back(path);
  }
  return removed;
}

Result<int> pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error{exit_codes::kInternal, fmt::format("socket: {}", std::strerror(errno))};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    return Error{exit_codes::kInternal,
                 fmt::format("cannot find a free port: {}", std::strerror(err))};
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace ddp::launcher
