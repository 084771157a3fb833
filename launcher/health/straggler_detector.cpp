// SPDX-License-Identifier: MIT
#include "launcher/health/straggler_detector.hpp"

#include <algorithm>

namespace ddp::launcher::health {

std::vector<Straggler> StragglerDetector::evaluate(
    const std::vector<std::optional<long long>>& steps, Clock::time_point now) {
  if (ranks_.size() != steps.size()) ranks_.assign(steps.size(), Samples{});
  std::vector<std::optional<double>> rates(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    Samples& s = ranks_[i];
    if (!steps[i]) continue;
    s.points.emplace_back(now, *steps[i]);
    // Keep the newest sample at least one window old, and nothing older than that.
    while (s.points.size() > 2 && now - s.points[1].first >= window_) s.points.pop_front();
    const auto& [t0, step0] = s.points.front();
    if (now - t0 < window_) continue;  // not a full window yet
    double seconds = std::chrono::duration<double>(now - t0).count();
    rates[i] = static_cast<double>(*steps[i] - step0) / seconds;
  }
  std::vector<double> known;
  for (const auto& r : rates) {
    if (r) known.push_back(*r);
  }
  std::vector<Straggler> found;
  if (known.size() < 2) return found;
  std::sort(known.begin(), known.end());
  const size_t n = known.size();
  const double median = n % 2 ? known[n / 2] : (known[n / 2 - 1] + known[n / 2]) / 2;
  for (size_t i = 0; i < rates.size(); ++i) {
    if (!rates[i]) continue;
    const bool slow = median > 0 && *rates[i] < ratio_ * median;
    if (slow && !ranks_[i].reported) found.push_back(Straggler{i, *rates[i], median});
    ranks_[i].reported = slow;
  }
  return found;
}

void StragglerDetector::reset() { ranks_.clear(); }

}  // namespace ddp::launcher::health
