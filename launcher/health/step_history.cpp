// SPDX-License-Identifier: MIT
#include "launcher/health/step_history.hpp"

#include <algorithm>
#include <cmath>

namespace ddp::launcher::health {

void StepHistory::note(int node, int rank, long long step, double now_s) {
  const std::pair<int, int> key{node, rank};
  auto it = series_.find(key);
  if (it == series_.end()) {
    if (series_.size() >= max_ranks_ || keep_ == 0) return;
    it = series_.emplace(key, std::deque<std::pair<double, long long>>{}).first;
  }
  auto& s = it->second;
  if (!s.empty() && (step < s.back().second || now_s < s.back().first)) s.clear();
  s.emplace_back(now_s, step);
  while (s.size() > keep_) s.pop_front();
}

void StepHistory::keep_only(const std::set<std::pair<int, int>>& live) {
  std::erase_if(series_, [&](const auto& entry) { return !live.contains(entry.first); });
}

std::optional<double> StepHistory::rate(int node, int rank) const {
  auto it = series_.find({node, rank});
  if (it == series_.end() || it->second.size() < 2) return std::nullopt;
  const auto& s = it->second;
  const auto& from = s[s.size() > 10 ? s.size() - 11 : 0];
  const auto& to = s.back();
  if (to.first <= from.first) return std::nullopt;
  return static_cast<double>(to.second - from.second) / (to.first - from.first);
}

nlohmann::json StepHistory::json(double now_s) const {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& [key, s] : series_) {
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& [t, step] : s) {
      samples.push_back({std::round(std::max(0.0, now_s - t) * 10) / 10, step});
    }
    ranks.push_back({{"node_rank", key.first}, {"rank", key.second}, {"samples", samples}});
  }
  return {{"keep", keep_}, {"ranks", std::move(ranks)}};
}

}  // namespace ddp::launcher::health
