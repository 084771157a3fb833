// SPDX-License-Identifier: MIT
#include "launcher/run/event_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "launcher/common/exit_codes.hpp"
#include "launcher/output/console_sink.hpp"

namespace ddp::launcher {

EventLog::~EventLog() {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

Result<Ok> EventLog::open(const std::string& target, ConsoleSink* stdout_sink) {
  if (target.empty()) return Ok{};
  if (target == "-") {
    if (stdout_sink) {
      sink_ = stdout_sink;
    } else {
      fd_ = STDOUT_FILENO;
    }
    return Ok{};
  }
  fd_ = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    return Error{exit_codes::kUsage,
                 fmt::format("--events: cannot write '{}': {}", target, std::strerror(errno))};
  }
  owns_fd_ = true;
  return Ok{};
}

void EventLog::emit(const char* event, nlohmann::json fields) {
  if (!enabled()) return;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  fields["event"] = event;
  fields["time"] = std::chrono::duration_cast<std::chrono::microseconds>(now).count() / 1e6;
  std::string line = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  if (sink_) {
    sink_->write_all(line);
  } else {
    write_fully(fd_, line);
  }
}

}  // namespace ddp::launcher
