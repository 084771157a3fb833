// SPDX-License-Identifier: MIT
#pragma once
/// StreamPump: carries one worker stream (stdout or stderr) from its pipe to the console (with
/// the rank prefix, whole lines only) and/or a log file (raw bytes), and keeps the last bytes of
/// stderr for the failure summary. Readiness comes from the Asio loop; reads are large (256 KiB)
/// and each read produces at most one console write.

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <string>
#include <vector>

#include "launcher/output/console_sink.hpp"
#include "launcher/output/line_framer.hpp"

namespace ddp::launcher {

struct StreamRoute {
  ConsoleSink* console = nullptr;  // nullptr: not shown on the console
  int file_fd = -1;                // -1: no log file (the pump owns and closes it)
  bool keep_tail = false;          // remember the last lines (stderr)
};

class StreamPump : public std::enable_shared_from_this<StreamPump> {
 public:
  StreamPump(boost::asio::io_context& io, int read_fd, StreamRoute route, std::string prefix);
  ~StreamPump();

  /// Starts waiting for data on the loop.
  void start();
  /// Reads what is in the pipe right now, as far as the console keeps up (never blocks; used
  /// when the worker has exited).
  void drain();
  /// Reads everything left (waiting for a slow console if it must), flushes a partial last line,
  /// closes the pipe and the file. Idempotent.
  void finish();
  /// Up to `max_lines` last lines of what went through this stream (keep_tail only).
  std::vector<std::string> tail_lines(size_t max_lines) const;

 private:
  void arm();
  /// Reads until the pipe is empty or `max_reads` reads; returns false at EOF/error.
  bool read_some(int max_reads);
  /// Reads until the pipe is empty; with a congested console either stops (false) or waits for
  /// it (true).
  void read_all(bool wait_for_console);
  void deliver(std::string_view chunk);
  bool console_congested() const;

  boost::asio::posix::stream_descriptor pipe_;
  StreamRoute route_;
  LineFramer framer_;
  std::string tail_;
  bool closed_ = false;
};

}  // namespace ddp::launcher
