// SPDX-License-Identifier: MIT
#pragma once
/// StreamPump: carries one worker stream (stdout or stderr) from its pipe to the console (with
/// the rank prefix, whole lines only) and/or a log file (raw bytes), and keeps the last bytes of
/// stderr for the failure summary. Readiness comes from the Asio loop; reads are large (256 KiB)
/// and each read produces at most one write per sink. While any of its sinks is congested the
/// pump leaves the data in the pipe (the worker then blocks on its full pipe): back-pressure, no
/// loss. When the log file fails (disk full...), the pump reports it once and sends that stream
/// to the console from then on, the bytes the file did not take included.

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/output/line_framer.hpp"
#include "launcher/output/output_sink.hpp"

namespace ddp::launcher {

/// torchrun's --duplicate-std*-filters: whole lines that contain any needle, with a prefix, go to
/// a file shared by every rank (each pump has its own O_APPEND description; whole lines per write).
struct DuplicateRoute {
  std::shared_ptr<OutputSink> file;  // nullptr: off
  std::vector<std::string> needles;
  std::string prefix;
};

struct StreamRoute {
  OutputSink* console = nullptr;     // nullptr: not shown on the console
  std::shared_ptr<OutputSink> file;  // nullptr: no log file
  std::string file_path;             // for the error report
  bool keep_tail = false;            // remember the last lines (stderr)
  /// Where the stream goes once its log file has failed (if it was not on the console already).
  OutputSink* fallback_console = nullptr;
  /// Told once about a failed log file: its path and errno (on the loop).
  std::function<void(const std::string& path, int error)> on_file_error;
  DuplicateRoute duplicate;
  /// Called for each read that completes one line or more (progress, docs/health.md).
  std::function<void()> on_line;
  /// Called once, the first time a console line over 1 MiB is cut (its newline did not come
  /// within kLongLineHold).
  std::function<void()> on_first_cut;
};

class StreamPump : public std::enable_shared_from_this<StreamPump> {
 public:
  /// A line over 1 MiB holds the console while nobody else has output for it; once another
  /// writer's output waits behind it, it gets at most this long for its newline; then it is cut
  /// there, so that a rank writing without newlines (a progress bar with \r, binary junk) cannot
  /// stop the others' output, nor, through their full pipes, the others.
  static constexpr std::chrono::seconds kLongLineHold{3};
  /// The same bound for the next long lines of a stream that was cut, until it writes a newline:
  /// none. An endless line would otherwise stall the others kLongLineHold for every MiB.
  static constexpr std::chrono::milliseconds kLongLineHoldAgain{0};

  /// `plain_prefix`: the prefix's text without color (a line starting with it gets no prefix).
  StreamPump(boost::asio::io_context& io, int read_fd, StreamRoute route, std::string prefix,
             std::string plain_prefix = {});
  ~StreamPump();

  /// Starts waiting for data on the loop.
  void start();
  /// Reads what is in the pipe right now, as far as the sinks keep up (never blocks; used
  /// when the worker has exited).
  void drain();
  /// Reads what is left in the pipe (every writer is gone, so at most a pipe's worth) into the
  /// sinks without waiting for them, flushes a partial last line, closes the pipe and hands the
  /// log file over to be finished in the background. Never blocks. Idempotent.
  void finish();
  /// Up to `max_lines` last lines of what went through this stream (keep_tail only).
  std::vector<std::string> tail_lines(size_t max_lines) const;

 private:
  void arm();
  /// Reads until the pipe is empty or `max_reads` reads; returns false at EOF/error.
  bool read_some(int max_reads);
  void deliver(std::string_view chunk);
  /// Appends the lines of `framed` (whole lines, no prefix) that contain a needle to the file.
  void duplicate_matching(std::string_view framed);
  void to_console(std::string_view chunk);
  void on_file_error(int error, std::string unwritten);
  /// The first congested sink, or nullptr.
  OutputSink* congested_sink() const;

  /// The console line is open (over 1 MiB): cut it if its newline does not come in time once
  /// another writer waits behind it.
  void watch_long_line();

  boost::asio::posix::stream_descriptor pipe_;
  boost::asio::steady_timer long_line_timer_;
  bool long_line_watched_ = false;
  std::uint64_t long_line_ = 0;     // which open line the timer and the wait callback are for
  bool cut_since_newline_ = false;  // a line was cut, and no newline came since
  StreamRoute route_;
  LineFramer framer_;
  LineFramer duplicate_framer_;  // no prefix: needles are matched against the worker's own text
  std::string tail_;
  std::string held_;  // read after the log file failed, before its error handler ran
  bool closed_ = false;
};

}  // namespace ddp::launcher
