// SPDX-License-Identifier: MIT
#pragma once
/// EventLog: --events FILE|-|fd:N. One JSON object per line, each written with a single write(),
/// for launch, worker_start, worker_exit, restart and summary. Disabled when no target is given.

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "launcher/common/result.hpp"
#include "launcher/health/recent_events.hpp"
#include "launcher/output/output_sink.hpp"

namespace ddp::launcher {

class EventLog {
 public:
  EventLog() = default;
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  /// "" disables, "-" is stdout (through `stdout_sink`, so events and worker lines never tear
  /// each other), "fd:N" a descriptor inherited from the caller (fd:1/fd:2 through the console
  /// sinks), anything else a file (created or truncated), written through an OutputSink on `io`
  /// so that a slow disk never blocks the loop. Error (bad path, descriptor not open for
  /// writing): exit 2.
  Result<Ok> open(const std::string& target, boost::asio::io_context& io,
                  OutputSink* stdout_sink = nullptr, OutputSink* stderr_sink = nullptr);
  /// Called once (on the loop) when writing the events file fails: its path and errno.
  void on_error(std::function<void(const std::string& path, int error)> handler);
  bool enabled() const { return sink_ != nullptr; }
  /// Adds "event" and "time" (seconds since the epoch, µs resolution) and writes one line. The
  /// event is kept in recent() too, file or not (for /status).
  void emit(const char* event, nlohmann::json fields = nlohmann::json::object());
  const health::RecentEvents& recent() const { return recent_; }

 private:
  std::string path_;
  std::unique_ptr<OutputSink> file_;
  OutputSink* sink_ = nullptr;  // file_ or the stdout sink
  health::RecentEvents recent_;
};

}  // namespace ddp::launcher
