// SPDX-License-Identifier: MIT
#include "launcher/run/error_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/exit_codes.hpp"
#include "launcher/output/output_sink.hpp"
#include "launcher/run/failure_report.hpp"
#include "rendezvous/json_text.hpp"

namespace ddp::launcher {

std::optional<std::string> read_error_file(const std::string& path, std::string* why) {
  auto skip = [&](std::string reason) -> std::optional<std::string> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  // stat() first: opening a device can have effects of its own, and a FIFO is not a file.
  struct stat before {};
  if (path.empty() || ::stat(path.c_str(), &before) != 0) return skip({});
  if (!S_ISREG(before.st_mode)) return skip("not a regular file");
  if (static_cast<size_t>(before.st_size) > kMaxErrorFileBytes) return skip("larger than 1 MiB");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return skip(std::strerror(errno));
  // The worker may have swapped the path for something else since the stat().
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || opened.st_dev != before.st_dev ||
      opened.st_ino != before.st_ino || !S_ISREG(opened.st_mode)) {
    ::close(fd);
    return skip("replaced while it was read");
  }
  std::string text(kMaxErrorFileBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > kMaxErrorFileBytes) return skip("larger than 1 MiB");
  text.resize(got);
  return text;
}

Result<Ok> copy_error_file(const std::string& text, int exit_code, const std::string& destination) {
  auto j = nlohmann::json::parse(lenient_json_text(text), nullptr, /*allow_exceptions=*/false);
  // As torch's ErrorHandler.dump_error_file: the child cannot know its code when a signal
  // ended it, so the launcher sets it (only in the structured message format).
  if (exit_code != 0 && j.is_object() && j.contains("message") && j["message"].is_object()) {
    j["message"]["errorCode"] = exit_code;
  }
  const std::string out = j.is_discarded() ? text : dump_json(j);
  ::unlink(destination.c_str());  // torch removes it first; a link there is not followed
  const int fd =
      ::open(destination.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 || !write_fully(fd, out)) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return Error{exit_codes::kInternal, fmt::format("cannot write the error file '{}': {}",
                                                    destination, std::strerror(err))};
  }
  ::close(fd);
  return Ok{};
}

}  // namespace ddp::launcher
