// SPDX-License-Identifier: MIT
#pragma once
/// EventLog: --events FILE|-. One JSON object per line, each written with a single write(), for
/// launch, worker_start, worker_exit, restart and summary. Disabled when no target is given.

#include <nlohmann/json.hpp>
#include <string>

#include "launcher/common/result.hpp"

namespace ddp::launcher {

class EventLog {
 public:
  EventLog() = default;
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  ~EventLog();

  /// "" disables, "-" is stdout, anything else a file (created or truncated). Error: exit 2.
  Result<Ok> open(const std::string& target);
  bool enabled() const { return fd_ >= 0; }
  /// Adds "event" and "time" (seconds since the epoch, µs resolution) and writes one line.
  void emit(const char* event, nlohmann::json fields = nlohmann::json::object());

 private:
  int fd_ = -1;
  bool owns_fd_ = false;
};

}  // namespace ddp::launcher
