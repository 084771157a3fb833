// SPDX-License-Identifier: MIT
#include "launcher/health/hang_verdict.hpp"

#include <algorithm>

namespace ddp::launcher::health {

std::chrono::milliseconds HangTimeouts::applying(const ProgressTracker& tracker,
                                                 Clock::time_point now) const {
  const bool grace = !tracker.job_started() && now < tracker.attempt_start() + startup;
  return grace ? std::max(steady, startup) : steady;
}

std::optional<HangVerdict> judge_hang(const ProgressTracker& tracker, const HangTimeouts& timeouts,
                                      Clock::time_point now) {
  const auto timeout = timeouts.applying(tracker, now);
  auto alive = tracker.alive_by_oldest_progress();
  if (alive.empty()) return std::nullopt;
  auto idle =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - tracker.job_last_progress());
  if (idle < timeout) return std::nullopt;
  return HangVerdict{idle, std::move(alive), !tracker.job_started()};
}

Clock::time_point next_hang_check(const ProgressTracker& tracker, const HangTimeouts& timeouts) {
  // Within the grace no verdict comes before its end (the idle time cannot reach the startup
  // timeout before the startup timeout has passed since the start); after it, the steady one.
  const auto steady_due = tracker.job_last_progress() + timeouts.steady;
  if (tracker.job_started()) return steady_due;
  return std::max(steady_due, tracker.attempt_start() + timeouts.startup);
}

}  // namespace ddp::launcher::health
