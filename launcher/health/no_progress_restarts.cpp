// SPDX-License-Identifier: MIT
#include "launcher/health/no_progress_restarts.hpp"

namespace ddp::launcher::health {

bool NoProgressRestarts::attempt_failed(std::optional<long long> best_step) {
  const bool first = attempts_++ == 0;
  if (best_step) steps_seen_ = true;
  if (!first && steps_seen_) {
    const bool progressed = best_step && (!job_best_ || *best_step > *job_best_);
    in_a_row_ = progressed ? 0 : in_a_row_ + 1;
  }
  if (best_step && (!job_best_ || *best_step > *job_best_)) job_best_ = best_step;
  return limit_ > 0 && in_a_row_ >= limit_;
}

}  // namespace ddp::launcher::health
