// SPDX-License-Identifier: MIT
#include "launcher/run/membership.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ddp::launcher {

std::string describe_nodes(const std::vector<rdzv::NodeAssignment>& round,
                           const std::vector<int>& ranks) {
  std::string out;
  for (int rank : ranks) {
    auto it = std::find_if(round.begin(), round.end(),
                           [rank](const auto& n) { return n.node_rank == rank; });
    if (!out.empty()) out += ", ";
    out += it == round.end() ? std::to_string(rank) : fmt::format("{} ({})", rank, it->name);
  }
  return out;
}

LossDecision decide_loss(const ElasticPolicy& policy,
                         const std::vector<rdzv::NodeAssignment>& round, const std::set<int>& lost,
                         int rescales_used) {
  LossDecision d;
  std::vector<int> gone(lost.begin(), lost.end());
  for (const auto& n : round) {
    if (!lost.count(n.node_rank)) d.survivors.push_back(n.node_rank);
  }
  const std::string what =
      fmt::format("lost node{} {}", gone.size() > 1 ? "s" : "", describe_nodes(round, gone));
  const int left = static_cast<int>(d.survivors.size());
  if (!policy.elastic) {
    d.text = what;
  } else if (left < policy.min_nodes) {
    d.text = fmt::format("{}: {} node{} left, fewer than the minimum of {}", what, left,
                         left == 1 ? "" : "s", policy.min_nodes);
  } else if (rescales_used >= policy.max_rescales) {
    d.text = fmt::format("{}: the job already changed membership {} time{} (max_rescales {})", what,
                         rescales_used, rescales_used == 1 ? "" : "s", policy.max_rescales);
  } else {
    d.rescale = true;
    d.text = fmt::format("{}; re-forming with {} node{}: {}", what, left, left == 1 ? "" : "s",
                         describe_nodes(round, d.survivors));
  }
  if (!d.rescale) d.survivors.clear();
  return d;
}

LossDecision decide_quarantine(const ElasticPolicy& policy,
                               const std::vector<rdzv::NodeAssignment>& round, int node_rank,
                               int failed_in_a_row, int limit, int rescales_used) {
  if (limit <= 0 || failed_in_a_row < limit) return {};
  LossDecision d = decide_loss(policy, round, {node_rank}, rescales_used);
  if (!d.rescale) return {};
  d.text = fmt::format(
      "node {} quarantined: its workers failed {} attempt{} in a row (node_failure_limit {}); "
      "re-forming with {} node{}: {}",
      describe_nodes(round, {node_rank}), failed_in_a_row, failed_in_a_row == 1 ? "" : "s", limit,
      d.survivors.size(), d.survivors.size() == 1 ? "" : "s", describe_nodes(round, d.survivors));
  return d;
}

std::optional<RoundPlan> reform_plan(const std::vector<int>& survivors, int old_rank) {
  auto it = std::find(survivors.begin(), survivors.end(), old_rank);
  if (it == survivors.end()) return std::nullopt;
  RoundPlan plan;
  plan.nodes = static_cast<int>(survivors.size());
  plan.node_rank = static_cast<int>(it - survivors.begin());
  return plan;
}

}  // namespace ddp::launcher
