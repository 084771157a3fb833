// SPDX-License-Identifier: MIT
#include "launcher/output/console_sink.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ddp::launcher {
namespace {
constexpr int kPipeBytes = 1 << 20;
}  // namespace

bool write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);  // the fd was left non-blocking by someone else; wait for room
      continue;
    }
    return false;
  }
  return true;
}

ConsoleSink::ConsoleSink(int fd) : fd_(fd), tty_(::isatty(fd) == 1) {
  // When the console is a pipe (ddprun ... | tee log), a larger pipe buffer means far fewer
  // blocking writes and context switches for the same data. Best effort; the reader is unaffected.
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && ::fcntl(fd, F_GETPIPE_SZ) < kPipeBytes) {
    ::fcntl(fd, F_SETPIPE_SZ, kPipeBytes);
  }
}

void ConsoleSink::write_all(std::string_view data) {
  if (broken_ || data.empty()) return;
  if (!write_fully(fd_, data)) broken_ = true;
}

}  // namespace ddp::launcher
