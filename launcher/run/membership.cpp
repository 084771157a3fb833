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

namespace {

// Why pending node `join` cannot be admitted at all, or nullopt.
std::optional<std::string> unusable(const ElasticPolicy& policy, const rdzv::JoinRequest& join) {
  if (auto excluded = rdzv::exclusion(policy.excluded_hosts, join.name)) return excluded;
  return rdzv::settings_mismatch(policy.settings, policy.node_name, join.settings,
                                 describe_pending(join));
}

std::vector<const rdzv::JoinRequest*> usable(const ElasticPolicy& policy,
                                             const std::vector<rdzv::JoinRequest>& pending) {
  std::vector<const rdzv::JoinRequest*> out;
  if (!policy.takes_pending) return out;
  for (const auto& p : pending) {
    if (!unusable(policy, p)) out.push_back(&p);
  }
  return out;
}

std::string describe_joins(const std::vector<const rdzv::JoinRequest*>& joins) {
  std::string out;
  for (const auto* j : joins) out += (out.empty() ? "" : ", ") + describe_pending(*j);
  return out;
}

}  // namespace

std::string describe_pending(const rdzv::JoinRequest& join) {
  return fmt::format("{} (pending #{})", join.name, join.seq);
}

LossDecision decide_loss(const ElasticPolicy& policy,
                         const std::vector<rdzv::NodeAssignment>& round, const std::set<int>& lost,
                         int rescales_used, const std::vector<rdzv::JoinRequest>& pending) {
  LossDecision d;
  std::vector<int> gone(lost.begin(), lost.end());
  for (const auto& n : round) {
    if (!lost.count(n.node_rank)) d.survivors.push_back(n.node_rank);
  }
  const std::string what =
      fmt::format("lost node{} {}", gone.size() > 1 ? "s" : "", describe_nodes(round, gone));
  auto spares = usable(policy, pending);
  const size_t room =
      static_cast<size_t>(std::max(0, policy.max_nodes - static_cast<int>(d.survivors.size())));
  if (spares.size() > room) spares.resize(room);
  const int left = static_cast<int>(d.survivors.size() + spares.size());
  const bool replaced = !spares.empty() && left >= policy.min_nodes;
  if (!policy.elastic && !replaced) {
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
    if (!spares.empty()) {
      d.text +=
          fmt::format(" and spare{} {}", spares.size() > 1 ? "s" : "", describe_joins(spares));
      for (const auto* s : spares) d.admitted.push_back(s->seq);
    }
  }
  if (!d.rescale) d.survivors.clear();
  return d;
}

ArrivalDecision decide_arrivals(const ElasticPolicy& policy,
                                const std::vector<rdzv::NodeAssignment>& round,
                                const std::vector<rdzv::JoinRequest>& pending,
                                const std::set<std::int64_t>& told_spare, int rescales_used) {
  ArrivalDecision d;
  if (!policy.takes_pending) return d;
  const bool budget_left = rescales_used < policy.max_rescales;
  std::vector<const rdzv::JoinRequest*> admit;
  int room = policy.max_nodes - static_cast<int>(round.size());
  for (const auto& p : pending) {
    if (auto why = unusable(policy, p)) {
      d.answers.push_back({PendingAnswer::Kind::Refused, p.seq, *why, 0});
    } else if (!budget_left) {
      d.answers.push_back(
          {PendingAnswer::Kind::Refused, p.seq,
           fmt::format("the job already changed membership {} time{} (max_rescales {})",
                       rescales_used, rescales_used == 1 ? "" : "s", policy.max_rescales),
           0});
    } else if (room > 0 && policy.admit_at_once) {
      admit.push_back(&p);
      --room;
    } else if (room <= 0 && !told_spare.count(p.seq)) {
      d.answers.push_back({PendingAnswer::Kind::Spare, p.seq, {}, 0});
    }
  }
  if (admit.empty()) return d;
  for (const auto& n : round) d.survivors.push_back(n.node_rank);
  for (const auto* p : admit) d.admitted.push_back(p->seq);
  const size_t total = round.size() + admit.size();
  d.text = fmt::format("admitting {} pending node{}: {}; re-forming with {} nodes: {}, {}",
                       admit.size(), admit.size() > 1 ? "s" : "", describe_joins(admit), total,
                       describe_nodes(round, d.survivors), describe_joins(admit));
  return d;
}

std::vector<PendingAnswer> restart_admissions(const ElasticPolicy& policy, int nodes, int round,
                                              const std::vector<rdzv::JoinRequest>& pending) {
  std::vector<PendingAnswer> out;
  int room = policy.max_nodes - nodes;
  for (const auto* p : usable(policy, pending)) {
    if (room-- <= 0) break;
    out.push_back({PendingAnswer::Kind::Restart, p->seq, {}, round});
  }
  return out;
}

const char* change_kind(size_t old_nodes, size_t survivors, size_t admitted) {
  if (admitted == 0) return "loss";
  return survivors == old_nodes ? "admit" : "spare";
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

std::chrono::milliseconds loss_verdict_wait(const ElasticPolicy& policy, size_t round_nodes,
                                            std::chrono::milliseconds heartbeat_timeout,
                                            std::chrono::milliseconds heartbeat_interval) {
  if (round_nodes < 2 || !(policy.elastic || policy.takes_pending)) return {};
  return heartbeat_timeout + 2 * heartbeat_interval;
}

bool renew_loss_verdict_hold(std::chrono::milliseconds late,
                             std::chrono::milliseconds heartbeat_interval, int renewals_used) {
  return late > heartbeat_interval && renewals_used < kMaxHoldRenewals;
}

std::optional<RoundPlan> reform_plan(const std::vector<int>& survivors, int old_rank) {
  auto it = std::find(survivors.begin(), survivors.end(), old_rank);
  if (it == survivors.end()) return std::nullopt;
  RoundPlan plan;
  plan.nodes = static_cast<int>(survivors.size());
  plan.node_rank = static_cast<int>(it - survivors.begin());
  return plan;
}

RoundPlan restart_plan(const RoundPlan& current, bool dynamic,
                       const std::optional<rdzv::RendezvousResult>& left) {
  RoundPlan plan;
  if (!dynamic) {
    plan.nodes = current.nodes;
    plan.node_rank = current.node_rank;
  }
  if (left) {
    plan.previous_round = left->round;
    plan.previous_node_rank = left->node_rank;
    plan.previous_round_nodes = left->num_nodes;
  }
  return plan;
}

Budgets budgets_after_join(Budgets own, const rdzv::RendezvousResult& joined) {
  if (joined.was_pending && joined.restarts_used >= 0 && joined.rescales_used >= 0)
    return {joined.restarts_used, joined.rescales_used, true};
  return {std::max(own.restarts_used, joined.restarts_used),
          std::max(own.rescales_used, joined.rescales_used), false};
}

RestartChange restart_change(int left_nodes, int joined_nodes, bool elastic) {
  if (left_nodes > joined_nodes && elastic) return RestartChange::Loss;
  if (left_nodes > 0 && left_nodes < joined_nodes) return RestartChange::Admit;
  return RestartChange::None;
}

}  // namespace ddp::launcher
