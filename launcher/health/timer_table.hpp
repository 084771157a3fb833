// SPDX-License-Identifier: MIT
#pragma once
/// TimerTable: the deadlines of torchrun's file-based watchdog (torch.distributed.elastic.timer).
/// Pure: the FileTimerServer feeds it the lines PyTorch's FileTimerClient writes and asks which
/// timers have expired; which signal reaches whom follows torch 2.x's FileTimerServer:
///   - one timer per (pid, scope); a negative expiration_time releases it;
///   - a timer has expired when expiration_time <= now (seconds since the epoch, as time.time());
///   - per pid, the expired timers in deadline order; the first one with a signal > 0 is the one
///     that kills (none: the pid is left alone, its timers dropped);
///   - every timer of a reaped pid, and of a pid that no longer runs, is dropped.

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddp::launcher::health {

/// One FileTimerRequest: {"version":1,"pid":P,"scope_id":S,"expiration_time":T,"signal":N}.
struct TimerRequest {
  pid_t pid = 0;
  std::string scope;
  double expiration_time = 0;  // seconds since the epoch; < 0: release
  int signal = 0;
};

/// Parses one line; nullopt (and why, in `error`) when it is not such a JSON object.
std::optional<TimerRequest> parse_timer_request(std::string_view line,
                                                std::string* error = nullptr);

struct ExpiredTimer {
  pid_t pid = 0;
  std::string scope;    // the timer that decides (the earliest with a signal)
  double deadline = 0;  // its expiration_time
  int signal = 0;       // 0: no timer of this pid asked for a signal: nobody is killed
  std::vector<std::string> all_scopes;  // every expired scope of the pid
};

class TimerTable {
 public:
  void apply(const TimerRequest& request);
  /// Expired timers by pid (ascending pid). Does not change the table.
  std::vector<ExpiredTimer> expired(double now) const;
  /// Drops every timer of these pids and of pids for which `running` says false.
  void clear(const std::vector<pid_t>& reaped, const std::function<bool(pid_t)>& running);
  /// Earliest deadline of any timer; nullopt when there is none.
  std::optional<double> next_deadline() const;
  size_t size() const { return timers_.size(); }

 private:
  std::map<std::pair<pid_t, std::string>, TimerRequest> timers_;
};

}  // namespace ddp::launcher::health
