// SPDX-License-Identifier: MIT
#include "launcher/run/event_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/exit_codes.hpp"
#include "launcher/output/output_sink.hpp"
#include "rendezvous/json_text.hpp"

namespace ddp::launcher {

Result<Ok> EventLog::open(const std::string& target, boost::asio::io_context& io,
                          OutputSink* stdout_sink, OutputSink* stderr_sink) {
  if (target.empty()) return Ok{};
  int inherited = -1;
  if (target == "-") {
    inherited = STDOUT_FILENO;
  } else if (target.rfind("fd:", 0) == 0) {
    char* end = nullptr;
    long n = std::strtol(target.c_str() + 3, &end, 10);
    if (target.size() == 3 || *end != '\0' || n < 0 || n > 1'000'000) {
      return Error{exit_codes::kUsage, fmt::format("--events: '{}' is not fd:N", target)};
    }
    inherited = static_cast<int>(n);
    int flags = ::fcntl(inherited, F_GETFL);
    if (flags < 0) {
      return Error{exit_codes::kUsage,
                   fmt::format("--events {}: descriptor {} is not open", target, inherited)};
    }
    if ((flags & O_ACCMODE) == O_RDONLY) {
      return Error{exit_codes::kUsage, fmt::format("--events {}: descriptor {} is not open for "
                                                   "writing",
                                                   target, inherited)};
    }
  }
  if (inherited >= 0) {
    // The console sinks own stdout and stderr: events then never tear a worker line.
    sink_ = inherited == STDOUT_FILENO   ? stdout_sink
            : inherited == STDERR_FILENO ? stderr_sink
                                         : nullptr;
    if (!sink_) {
      // Workers must not inherit the event stream (and keep a reader waiting after ddprun exits).
      if (inherited > STDERR_FILENO) ::fcntl(inherited, F_SETFD, FD_CLOEXEC);
      file_ = std::make_unique<OutputSink>(io, inherited);
      sink_ = file_.get();
    }
    return Ok{};
  }
  int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Error{exit_codes::kUsage,
                 fmt::format("--events: cannot write '{}': {}", target, std::strerror(errno))};
  }
  path_ = target;
  file_ = std::make_unique<OutputSink>(io, fd, /*owns_fd=*/true);
  sink_ = file_.get();
  return Ok{};
}

void EventLog::on_error(std::function<void(const std::string& path, int error)> handler) {
  if (!file_ || path_.empty()) return;
  file_->on_error([path = path_, handler = std::move(handler)](int error, const std::string&) {
    handler(path, error);
  });
}

void EventLog::emit(const char* event, nlohmann::json fields) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  fields["event"] = event;
  fields["time"] = std::chrono::duration_cast<std::chrono::microseconds>(now).count() / 1e6;
  recent_.add(fields);
  if (!enabled()) return;
  std::string line = dump_json(fields);
  line += '\n';
  sink_->write_all(line);
}

}  // namespace ddp::launcher
