// SPDX-License-Identifier: MIT
#include "launcher/output/stream_pump.hpp"

#include <unistd.h>

#include <cerrno>

namespace ddp::launcher {
namespace {

constexpr size_t kReadBytes = size_t{256} * 1024;
constexpr size_t kTailKeep = size_t{16} * 1024;

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
                       std::string prefix, std::string plain_prefix)
    : pipe_(io, read_fd),
      long_line_timer_(io),
      route_(std::move(route)),
      framer_(std::move(prefix), std::move(plain_prefix)) {
  pipe_.non_blocking(true);
}

// A pump destroyed before finish() (an aborted run) drops its log files' queues: retiring them
// would outlive the loop they report to.
StreamPump::~StreamPump() = default;

void StreamPump::start() {
  if (route_.file) {
    route_.file->on_error([weak = weak_from_this(), path = route_.file_path,
                           report = route_.on_file_error](int error, std::string unwritten) {
      if (report) report(path, error);
      if (auto self = weak.lock()) self->on_file_error(error, std::move(unwritten));
    });
  }
  arm();
}

OutputSink* StreamPump::congested_sink() const {
  if (route_.console && route_.console->congested()) return route_.console;
  if (route_.file && !route_.file->failed() && route_.file->congested()) return route_.file.get();
  return nullptr;
}

void StreamPump::arm() {
  if (closed_) return;
  if (route_.console && route_.console->holding(this)) {
    // Our lines wait behind another rank's open long line: read nothing more until they are out.
    route_.console->when_released(this, [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->arm();
    });
    return;
  }
  if (OutputSink* sink = congested_sink()) {
    // A sink is behind: leave the data in the pipe (the worker blocks when it is full) until
    // the sink has drained.
    sink->when_drained([weak = weak_from_this()] {
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
    // arm() pauses until the sink catches up, or our held lines are out.
    if (congested_sink() || (route_.console && route_.console->holding(this))) return true;
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

void StreamPump::to_console(std::string_view chunk) {
  std::string& out = framed();
  out.clear();
  // A newline: this stream writes lines after all; its next long line gets the full hold again.
  if (chunk.find('\n') != std::string_view::npos) cut_since_newline_ = false;
  framer_.frame(chunk, out);
  route_.console->write_lines(this, out, framer_.line_open());
  if (framer_.line_open()) {
    watch_long_line();
  } else if (long_line_watched_) {  // the line ended by itself
    long_line_watched_ = false;
    ++long_line_;
    long_line_timer_.cancel();
  }
}

void StreamPump::watch_long_line() {
  if (long_line_watched_) return;
  long_line_watched_ = true;
  const auto line = ++long_line_;
  // Nobody waits: the line holds the console as long as it takes (it is passed on as it comes,
  // nothing grows). The hold bound starts when another writer's output first waits behind it.
  route_.console->when_waited_on(this, [weak = weak_from_this(), line] {
    auto self = weak.lock();
    if (!self || self->long_line_ != line || self->closed_) return;
    self->long_line_timer_.expires_after(self->cut_since_newline_ ? kLongLineHoldAgain
                                                                  : kLongLineHold);
    self->long_line_timer_.async_wait([weak, line](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec || self->long_line_ != line) return;
      self->long_line_watched_ = false;
      ++self->long_line_;
      if (self->closed_ || !self->route_.console || !self->framer_.line_open()) return;
      // No newline in time: cut here, and the others' lines go out.
      std::string& out = framed();
      out.clear();
      const bool first = self->framer_.cuts() == 0;
      self->framer_.cut(out);
      self->cut_since_newline_ = true;
      self->route_.console->write_lines(self.get(), out, false);
      if (first && self->route_.on_first_cut) self->route_.on_first_cut();
    });
  });
}

void StreamPump::deliver(std::string_view chunk) {
  if (route_.on_line && chunk.find('\n') != std::string_view::npos) route_.on_line();
  if (route_.file && !route_.file->failed()) {
    route_.file->write_all(chunk);
  } else if (route_.file && !route_.console && route_.fallback_console) {
    held_.append(chunk);  // the file just failed; its error handler sends this to the console
  }
  if (route_.console) to_console(chunk);
  if (route_.duplicate.file && !route_.duplicate.file->failed()) {
    std::string lines;
    duplicate_framer_.frame(chunk, lines);
    duplicate_matching(lines);
  }
  if (route_.keep_tail) {
    tail_.append(chunk);
    if (tail_.size() > 2 * kTailKeep) tail_.erase(0, tail_.size() - kTailKeep);
  }
}

void StreamPump::duplicate_matching(std::string_view framed) {
  std::string out;
  while (!framed.empty()) {
    size_t nl = framed.find('\n');
    std::string_view line = framed.substr(0, nl == std::string_view::npos ? framed.size() : nl + 1);
    framed.remove_prefix(line.size());
    for (const auto& needle : route_.duplicate.needles) {
      if (line.find(needle) != std::string_view::npos) {
        out.append(route_.duplicate.prefix).append(line);
        break;
      }
    }
  }
  if (!out.empty()) route_.duplicate.file->write_all(out);
}

void StreamPump::on_file_error(int, std::string unwritten) {
  if (route_.console || !route_.fallback_console) return;  // the console has it all already
  // Nothing is lost: what the file did not take, and everything after it, goes to the console.
  route_.console = route_.fallback_console;
  unwritten += held_;
  std::string().swap(held_);
  if (!unwritten.empty()) to_console(unwritten);
  if (closed_) {
    std::string& out = framed();
    out.clear();
    if (framer_.finish(out)) route_.console->write_lines(this, out, false);
  }
}

void StreamPump::drain() {
  if (closed_) return;
  while (!congested_sink() && !(route_.console && route_.console->holding(this))) {
    ssize_t n = ::read(pipe_.native_handle(), scratch(), kReadBytes);
    if (n > 0) {
      deliver(std::string_view(scratch(), static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // empty (EAGAIN), EOF or error
  }
}

void StreamPump::finish() {
  if (closed_) return;
  // The end of the stream: every writer is gone, so what is left is at most one pipe's worth
  // (F_SETPIPE_SZ). It goes into the sinks' queues even past their high-water mark, so that the
  // loop never waits here for a slow console (the hosted store and heartbeats run on it).
  while (true) {
    ssize_t n = ::read(pipe_.native_handle(), scratch(), kReadBytes);
    if (n > 0) {
      deliver(std::string_view(scratch(), static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // empty (EAGAIN), EOF or error
  }
  closed_ = true;
  long_line_timer_.cancel();
  std::string& out = framed();
  out.clear();
  if (route_.console && framer_.finish(out)) route_.console->write_lines(this, out, false);
  boost::system::error_code ignored;
  pipe_.cancel(ignored);
  pipe_.close(ignored);
  OutputSink::retire(std::move(route_.file));
  route_.file.reset();
  if (route_.duplicate.file) {
    std::string last;
    if (!route_.duplicate.file->failed() && duplicate_framer_.finish(last))
      duplicate_matching(last);
    OutputSink::retire(std::move(route_.duplicate.file));
    route_.duplicate.file.reset();
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
