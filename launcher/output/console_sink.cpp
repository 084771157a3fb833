// SPDX-License-Identifier: MIT
#include "launcher/output/console_sink.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>

namespace ddp::launcher {
namespace {

constexpr int kPipeBytes = 1 << 20;

/// A second, non-blocking open file description of `fd` (pipe or terminal), or -1.
int reopen_non_blocking(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) return -1;
  return ::open(fmt::format("/proc/self/fd/{}", fd).c_str(),
                O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
}

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
      ::poll(&p, 1, -1);  // a non-blocking description: wait for room
      continue;
    }
    return false;
  }
  return true;
}

ConsoleSink::ConsoleSink(boost::asio::io_context& io, int fd) : fd_(fd), tty_(::isatty(fd) == 1) {
  // When the console is a pipe (ddprun ... | tee log), a larger pipe buffer means far fewer
  // writes and context switches for the same data. Best effort; the reader is unaffected.
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && ::fcntl(fd, F_GETPIPE_SZ) < kPipeBytes) {
    ::fcntl(fd, F_SETPIPE_SZ, kPipeBytes);
  }
  int own = reopen_non_blocking(fd);
  if (own >= 0) async_.emplace(io, own);
}

ConsoleSink::~ConsoleSink() { *alive_ = false; }

void ConsoleSink::write_all(std::string_view data) {
  if (broken_ || data.empty()) return;
  if (!async_) {
    if (!write_fully(fd_, data)) broken_ = true;
    return;
  }
  if (queued() == 0) {  // fast path: straight to the console, queue only the rest
    queue_.clear();
    head_ = 0;
    while (!data.empty()) {
      ssize_t n = ::write(async_->native_handle(), data.data(), data.size());
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        broken_ = true;
        wake_waiters();
        return;
      }
    }
    if (data.empty()) return;
  }
  queue_.append(data);
  arm();
}

void ConsoleSink::flush_some() {
  while (queued() > 0) {
    ssize_t n = ::write(async_->native_handle(), queue_.data() + head_, queued());
    if (n > 0) {
      head_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    broken_ = true;  // EPIPE and friends: nobody reads any more
    queue_.clear();
    head_ = 0;
    break;
  }
  if (queued() == 0) {
    queue_.clear();
    head_ = 0;
  } else if (head_ > (1u << 20) && head_ > queue_.size() / 2) {
    queue_.erase(0, head_);  // keep the buffer from growing without bound
    head_ = 0;
  }
  if (queued() < kHighWater / 2) wake_waiters();
}

void ConsoleSink::arm() {
  if (armed_ || broken_) return;
  armed_ = true;
  async_->async_wait(boost::asio::posix::stream_descriptor::wait_write,
                     [this, alive = alive_](const boost::system::error_code& ec) {
                       if (!*alive) return;
                       armed_ = false;
                       if (ec) return;
                       flush_some();
                       if (queued() > 0) arm();
                     });
}

void ConsoleSink::when_drained(std::function<void()> resume) {
  if (!congested()) {
    resume();
    return;
  }
  waiters_.push_back(std::move(resume));
}

void ConsoleSink::wake_waiters() {
  if (waiters_.empty()) return;
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& resume : waiters) resume();
}

void ConsoleSink::flush_blocking() {
  if (!async_ || broken_ || queued() == 0) return;
  if (!write_fully(async_->native_handle(), std::string_view(queue_).substr(head_))) broken_ = true;
  queue_.clear();
  head_ = 0;
}

}  // namespace ddp::launcher
