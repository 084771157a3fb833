// SPDX-License-Identifier: MIT
#pragma once
/// StepHistory: each rank's step, sampled by the status server once a second (this node's ranks
/// and the other nodes' published ones), so that the steps/s of /status and the dashboard's
/// chart do not start from nothing when a page is reloaded or another viewer comes
/// (docs/health.md, "Steps per second"). Pure and bounded: at most `keep` samples per rank and
/// `max_ranks` ranks; a step lower than the last (a restart) starts the rank's series again, and
/// the ranks no longer in the job are dropped (keep_only, on every sample tick).

#include <cstddef>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

namespace ddp::launcher::health {

class StepHistory {
 public:
  explicit StepHistory(size_t keep = 120, size_t max_ranks = 4096)
      : keep_(keep), max_ranks_(max_ranks) {}

  /// Rank (node, rank) was at `step` at `now_s` (seconds on this node's steady clock).
  void note(int node, int rank, long long step, double now_s);
  /// Steps per second over the last ~10 samples (nullopt: fewer than two samples).
  std::optional<double> rate(int node, int rank) const;
  /// {"keep": N, "ranks": [{"node_rank", "rank", "samples": [[age_s, step], ...oldest first]}]}
  nlohmann::json json(double now_s) const;
  /// Forgets every rank not in `live` (node, rank): the ranks gone from the job (a re-form's
  /// departed nodes, a smaller attempt) leave /history, and make room under max_ranks, at once.
  void keep_only(const std::set<std::pair<int, int>>& live);
  void clear() { series_.clear(); }
  size_t ranks() const { return series_.size(); }

 private:
  size_t keep_;
  size_t max_ranks_;
  std::map<std::pair<int, int>, std::deque<std::pair<double, long long>>> series_;
};

}  // namespace ddp::launcher::health
