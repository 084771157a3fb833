// SPDX-License-Identifier: MIT
#pragma once
/// EventLog: --events FILE|-. One JSON object per line, each written with a single write(), for
/// launch, worker_start, worker_exit, restart and summary. Disabled when no target is given.

#include <nlohmann/json.hpp>
#include <string>

#include "launcher/common/result.hpp"
#include "launcher/output/console_sink.hpp"

namespace ddp::launcher {

class EventLog {
 public:
  EventLog() = default;
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  ~EventLog();

  /// "" disables, "-" is stdout (through `stdout_sink`, so events and worker lines never tear
  /// each other), anything else a file (created or truncated). Error: exit 2.
  Result<Ok> open(const std::string& target, ConsoleSink* stdout_sink = nullptr);
  bool enabled() const { return fd_ >= 0 || sink_ != nullptr; }
  /// Adds "event" and "time" (seconds since the epoch, µs resolution) and writes one line.
  void emit(const char* event, nlohmann::json fields = nlohmann::json::object());

 private:
  int fd_ = -1;
  bool owns_fd_ = false;
  ConsoleSink* sink_ = nullptr;
};

}  // namespace ddp::launcher
