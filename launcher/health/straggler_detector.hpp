// SPDX-License-Identifier: MIT
#pragma once
/// StragglerDetector (--straggler-ratio R): a rank whose step rate over the last window (a
/// minute) stays below R times the median rank's rate is a straggler. Reported once until it
/// recovers; no action is taken. Pure: the monitor calls evaluate() on a periodic tick with each
/// local rank's last step (from heartbeats) and the time.

#include <chrono>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "launcher/health/progress_tracker.hpp"

namespace ddp::launcher::health {

struct Straggler {
  size_t local_rank = 0;
  double rate = 0;  // steps per second over the window
  double median_rate = 0;
};

class StragglerDetector {
 public:
  explicit StragglerDetector(double ratio,
                             std::chrono::milliseconds window = std::chrono::minutes(1))
      : ratio_(ratio), window_(window) {}

  /// Newly found stragglers. Needs at least two ranks with steps and a full window of samples.
  std::vector<Straggler> evaluate(const std::vector<std::optional<long long>>& steps,
                                  Clock::time_point now);
  void reset();
  /// Whether `local_rank` is a straggler now (found and not yet recovered).
  bool flagged(size_t local_rank) const {
    return local_rank < ranks_.size() && ranks_[local_rank].reported;
  }

 private:
  struct Samples {
    std::deque<std::pair<Clock::time_point, long long>> points;
    bool reported = false;
  };
  double ratio_;
  std::chrono::milliseconds window_;
  std::vector<Samples> ranks_;
};

}  // namespace ddp::launcher::health
