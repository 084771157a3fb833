// SPDX-License-Identifier: MIT
#include "launcher/output/stream_pump.hpp"

#include <unistd.h>

#include <cerrno>

namespace ddp::launcher {
namespace {

constexpr size_t kReadBytes = 256 * 1024;
constexpr size_t kTailKeep = 16 * 1024;

/// One read buffer and one framing buffer for every pump: ddprun's loop is single-threaded,
/// and a per-pump framing buffer would keep ~300 KiB per stream alive after a burst.
char* scratch() {
  static std::vector<char> buffer(kReadBytes);
  return buffer.data();
}

std::string& framed() {
  static std::string buffer;
  return buffer;
}

}  // namespace

StreamPump::StreamPump(boost::asio::io_context& io, int read_fd, StreamRoute route,
                       std::string prefix)
    : pipe_(io, read_fd), route_(route), framer_(std::move(prefix)) {
  pipe_.non_blocking(true);
}

StreamPump::~StreamPump() {
  if (route_.file_fd >= 0) ::close(route_.file_fd);
}

void StreamPump::start() { arm(); }

bool StreamPump::console_congested() const {
  return route_.console != nullptr && route_.console->congested();
}

void StreamPump::arm() {
  if (closed_) return;
  if (console_congested()) {
    // The console is behind: leave the data in the pipe (the worker blocks when it is full)
    // until the sink has drained.
    route_.console->when_drained([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->arm();
    });
    return;
  }
  pipe_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                   [self = shared_from_this()](const boost::system::error_code& ec) {
                     if (ec || self->closed_) return;
                     // A bounded number of reads per wake-up keeps the ranks fair.
                     if (self->read_some(4)) {
                       self->arm();
                     } else {
                       self->finish();
                     }
                   });
}

bool StreamPump::read_some(int max_reads) {
  for (int i = 0; i < max_reads; ++i) {
    if (console_congested()) return true;  // arm() pauses until the console catches up
    ssize_t n = ::read(pipe_.native_handle(), scratch(), kReadBytes);
    if (n > 0) {
      deliver(std::string_view(scratch(), static_cast<size_t>(n)));
      if (static_cast<size_t>(n) < kReadBytes) return true;  // pipe is empty now
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EOF or error
  }
  return true;
}

void StreamPump::deliver(std::string_view chunk) {
  if (route_.file_fd >= 0 && !write_fully(route_.file_fd, chunk)) {
    ::close(route_.file_fd);  // disk full or similar: stop logging, keep the console going
    route_.file_fd = -1;
  }
  if (route_.console) {
    std::string& out = framed();
    out.clear();
    framer_.frame(chunk, out);
    route_.console->write_all(out);
  }
  if (route_.keep_tail) {
    tail_.append(chunk);
    if (tail_.size() > 2 * kTailKeep) tail_.erase(0, tail_.size() - kTailKeep);
  }
}

void StreamPump::read_all(bool wait_for_console) {
  while (true) {
    if (console_congested()) {
      if (!wait_for_console) return;
      route_.console->flush_blocking();
    }
    ssize_t n = ::read(pipe_.native_handle(), scratch(), kReadBytes);
    if (n > 0) {
      deliver(std::string_view(scratch(), static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // empty (EAGAIN), EOF or error
  }
}

void StreamPump::drain() {
  if (!closed_) read_all(/*wait_for_console=*/false);
}

void StreamPump::finish() {
  if (closed_) return;
  // The end of the stream: everything left in the pipe goes out now, waiting for a slow console
  // if need be (every writer is gone, so this holds up nothing but ddprun's own next step).
  read_all(/*wait_for_console=*/true);
  closed_ = true;
  std::string& out = framed();
  out.clear();
  if (route_.console && framer_.finish(out)) route_.console->write_all(out);
  boost::system::error_code ignored;
  pipe_.cancel(ignored);
  pipe_.close(ignored);
  if (route_.file_fd >= 0) {
    ::close(route_.file_fd);
    route_.file_fd = -1;
  }
}

std::vector<std::string> StreamPump::tail_lines(size_t max_lines) const {
  std::vector<std::string> lines;
  std::string_view text(tail_);
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  while (!text.empty() && lines.size() < max_lines) {
    size_t nl = text.rfind('\n');
    lines.emplace_back(nl == std::string_view::npos ? text : text.substr(nl + 1));
    if (nl == std::string_view::npos) break;
    text = text.substr(0, nl);
  }
  return {lines.rbegin(), lines.rend()};
}

}  // namespace ddp::launcher
