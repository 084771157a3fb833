#include "rendezvous/log.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>

namespace ddp::rdzv {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& current_sink() {
  static LogSink sink;
  return sink;
}

// Longest line written in one piece: a pipe write up to PIPE_BUF (4096 on Linux) is atomic and,
// once poll reports the pipe writable, does not block.
constexpr std::size_t kMaxLineBytes = 4000;

// The default destination. The store must keep serving whatever happens to its stderr: a reader
// that went away (EPIPE; SIGPIPE is ignored by both binaries), a full disk, or a reader that
// stopped reading. So a line is written only if stderr is writable right now, without waiting;
// lines that could not be written are counted and the count is reported with the next line
// that gets through. After EPIPE/EBADF stderr is not tried again.
struct StderrWriter {
  std::size_t dropped = 0;
  bool gone = false;

  void write_line(std::string_view line, bool store_prefix) {
    if (gone) return;
    std::string text = store_prefix ? "ddprun-store: " : "";
    if (dropped > 0)
      text +=
          "(" + std::to_string(dropped) + " earlier log lines dropped: stderr was not writable) ";
    text.append(line.substr(0, kMaxLineBytes - text.size() - 1));
    text.push_back('\n');
    pollfd p{STDERR_FILENO, POLLOUT, 0};
    if (::poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) {
      if (p.revents & (POLLERR | POLLNVAL)) gone = true;
      ++dropped;
      return;
    }
    const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
    if (n < 0) {
      if (errno == EPIPE || errno == EBADF) gone = true;
      ++dropped;
      return;
    }
    dropped = 0;
  }
};

StderrWriter& stderr_writer() {
  static StderrWriter writer;
  return writer;
}

}  // namespace

LogSink set_log_sink(LogSink sink) {
  std::lock_guard lock(sink_mutex());
  LogSink previous = std::move(current_sink());
  current_sink() = std::move(sink);
  return previous;
}

namespace {
void write_log_line(std::string_view line, bool store_prefix) {
  std::lock_guard lock(sink_mutex());
  if (current_sink()) {
    current_sink()(line);
    return;
  }
  stderr_writer().write_line(line, store_prefix);
}
}  // namespace

void log_line(std::string_view line) { write_log_line(line, true); }

void log_named_line(std::string_view line) { write_log_line(line, false); }

}  // namespace ddp::rdzv
