// SPDX-License-Identifier: MIT
#include "launcher/health/hang_verdict.hpp"

#include <algorithm>

namespace ddp::launcher::health {

std::chrono::milliseconds HangTimeouts::applying(const ProgressTracker& tracker) const {
  return tracker.job_progressed() ? steady : std::max(steady, startup);
}

std::optional<HangVerdict> judge_hang(const ProgressTracker& tracker, const HangTimeouts& timeouts,
                                      Clock::time_point now) {
  const auto timeout = timeouts.applying(tracker);
  auto alive = tracker.alive_by_oldest_progress();
  if (alive.empty()) return std::nullopt;
  auto idle =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - tracker.job_last_progress());
  if (idle < timeout) return std::nullopt;
  return HangVerdict{idle, std::move(alive)};
}

Clock::time_point next_hang_check(const ProgressTracker& tracker, const HangTimeouts& timeouts) {
  return tracker.job_last_progress() + timeouts.applying(tracker);
}

}  // namespace ddp::launcher::health
