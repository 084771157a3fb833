// SPDX-License-Identifier: MIT
#include "launcher/health/hang_verdict.hpp"

namespace ddp::launcher::health {

std::optional<HangVerdict> judge_hang(const ProgressTracker& tracker,
                                      std::chrono::milliseconds timeout, Clock::time_point now) {
  auto alive = tracker.alive_by_oldest_progress();
  if (alive.empty()) return std::nullopt;
  auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(now - tracker.job_last_progress());
  if (idle < timeout) return std::nullopt;
  return HangVerdict{idle, std::move(alive)};
}

Clock::time_point next_hang_check(const ProgressTracker& tracker, std::chrono::milliseconds timeout) {
  return tracker.job_last_progress() + timeout;
}

}  // namespace ddp::launcher::health
