// SPDX-License-Identifier: MIT
#pragma once
/// Membership: the elastic rules of a c10d job started with --nnodes=MIN:MAX, as pure decisions.
/// When a node is lost the survivors either re-form without it (a "rescale": the job goes on
/// with fewer nodes) or the job ends (exit 74). Unit-tested in tests/launcher/unit; the Agent
/// acts on the decisions through JobRendezvous.

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/multinode/job_rendezvous.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddp::launcher {

struct ElasticPolicy {
  bool elastic = false;  // c10d with MIN < MAX: a loss may be survived
  int min_nodes = 1;
  int max_rescales = 100;  // membership changes allowed in the whole job
};

/// What to do about the nodes of the current round that are lost.
struct LossDecision {
  bool rescale = false;        // true: re-form with `survivors`; false: the job ends (exit 74)
  std::vector<int> survivors;  // the round's node ranks that go on, in their old order
  std::string text;            // one line: what was lost and what happens
};

/// `round`: every node of the current round; `lost`: the node ranks known to be gone (at least
/// one); `rescales_used`: membership changes so far. The job ends when the policy is not
/// elastic, when fewer than MIN nodes would remain, or when the rescale budget is spent.
LossDecision decide_loss(const ElasticPolicy& policy,
                         const std::vector<rdzv::NodeAssignment>& round, const std::set<int>& lost,
                         int rescales_used);

/// This node's (`node_rank`'s) workers failed `failed_in_a_row` attempts in a row, the current
/// one included. At `limit` (0: never) the node is quarantined if the others can go on without
/// it (as decide_loss says for its loss): they re-form and it leaves the job. Otherwise
/// (`rescale` false, empty text) the failure takes the usual way: a restart or the end.
LossDecision decide_quarantine(const ElasticPolicy& policy,
                               const std::vector<rdzv::NodeAssignment>& round, int node_rank,
                               int failed_in_a_row, int limit, int rescales_used);

/// How this node joins the round that re-forms the job from `survivors` (old node ranks, in
/// order): the survivors keep their relative order and take the ranks 0..S-1, and the round is
/// complete as soon as all S have joined (no last-call wait). Empty plan when this node
/// (`old_rank`) is not a survivor.
std::optional<RoundPlan> reform_plan(const std::vector<int>& survivors, int old_rank);

/// "0 (host-a), 2 (host-c)": node ranks and names of a round's nodes.
std::string describe_nodes(const std::vector<rdzv::NodeAssignment>& round,
                           const std::vector<int>& ranks);

}  // namespace ddp::launcher
