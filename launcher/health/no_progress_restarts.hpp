// SPDX-License-Identifier: MIT
#pragma once
/// NoProgressRestarts (--no-progress-restarts K): when heartbeats carry step numbers, a restart
/// whose attempt reaches no step beyond the best of every earlier attempt is a restart that did
/// not help; K of those in a row end the job instead of burning the remaining restarts. Jobs that
/// never send a step number are never stopped by this. K = 0 turns it off. Pure.

#include <optional>

namespace ddp::launcher::health {

class NoProgressRestarts {
 public:
  explicit NoProgressRestarts(int limit) : limit_(limit) {}

  /// At the end of a failed attempt, with the highest step it reached (nullopt: none). Returns
  /// true when no further restart should be made.
  bool attempt_failed(std::optional<long long> best_step);
  int in_a_row() const { return in_a_row_; }
  std::optional<long long> job_best() const { return job_best_; }

 private:
  int limit_;
  int attempts_ = 0;
  int in_a_row_ = 0;
  bool steps_seen_ = false;
  std::optional<long long> job_best_;
};

}  // namespace ddp::launcher::health
