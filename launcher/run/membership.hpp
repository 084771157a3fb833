// SPDX-License-Identifier: MIT
#pragma once
/// Membership: the elastic rules of a c10d job started with --nnodes=MIN:MAX, as pure decisions.
/// When a node is lost the survivors either re-form without it (a "rescale": the job goes on
/// with fewer nodes, or as many when a spare takes its place) or the job ends (exit 74). A node
/// that arrives while the job runs waits as *pending*: it is admitted by a re-form (at once, or
/// at the next restart with admit=restart), kept as a *spare* when the job is full, or refused.
/// Unit-tested in tests/launcher/unit; the Agent acts on the decisions through JobRendezvous.

#include <chrono>
#include <cstdint>
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
  int max_rescales = 100;      // membership changes allowed in the whole job
  int max_nodes = 1;           // MAX: no admission beyond it (arrivals wait as spares)
  bool takes_pending = false;  // c10d: pending nodes may be admitted and replace lost ones
  bool admit_at_once = true;   // false (admit=restart): arrivals wait for a restart or re-form
  std::vector<std::string> excluded_hosts{};  // --exclude-hosts: pending nodes from these refused
  rdzv::AgreedSettings settings{};            // this node's; a pending node's must be the same
  std::string node_name{};                    // this node's, for the mismatch message
};

/// What to do about the nodes of the current round that are lost.
struct LossDecision {
  bool rescale = false;        // true: re-form with `survivors`; false: the job ends (exit 74)
  std::vector<int> survivors;  // the round's node ranks that go on, in their old order
  std::vector<std::int64_t> admitted;  // spares (pending numbers) that join after the survivors
  std::string text;                    // one line: what was lost and what happens
};

/// What the running nodes do about the live pending nodes.
struct ArrivalDecision {
  std::vector<PendingAnswer> answers;  // refusals and spare notices (Restart never here)
  std::vector<std::int64_t> admitted;  // non-empty: re-form now, every node + these after them
  std::vector<int> survivors;          // with `admitted`: every node of the round, in order
  std::string text;                    // with `admitted`: one line for the re-form
};

/// `round`: every node of the current round; `lost`: the node ranks known to be gone (at least
/// one); `rescales_used`: membership changes so far. The job ends when the policy is not
/// elastic, when fewer than MIN nodes would remain, or when the rescale budget is spent.
/// `pending`: the live pending nodes; usable ones fill the places of the lost nodes (hot
/// spares), up to MAX, so that a job at MIN:MAX with a spare re-forms at the same size.
LossDecision decide_loss(const ElasticPolicy& policy,
                         const std::vector<rdzv::NodeAssignment>& round, const std::set<int>& lost,
                         int rescales_used, const std::vector<rdzv::JoinRequest>& pending = {});

/// The round's node 0 judges the live pending nodes (`told_spare`: those already told they are
/// spares): an excluded host or one whose settings differ is refused; with room below MAX (and
/// admit at once, budget left) the first ones are admitted by a re-form of every node; the
/// others wait as spares. With the rescale budget spent every usable arrival is refused.
ArrivalDecision decide_arrivals(const ElasticPolicy& policy,
                                const std::vector<rdzv::NodeAssignment>& round,
                                const std::vector<rdzv::JoinRequest>& pending,
                                const std::set<std::int64_t>& told_spare, int rescales_used);

/// At a restart (its round met as configured): the usable pending nodes that fit below MAX with
/// `nodes` running, invited into that round (kind Restart, `round` set).
std::vector<PendingAnswer> restart_admissions(const ElasticPolicy& policy, int nodes, int round,
                                              const std::vector<rdzv::JoinRequest>& pending);

/// This node's (`node_rank`'s) workers failed `failed_in_a_row` attempts in a row, the current
/// one included. At `limit` (0: never) the node is quarantined if the others can go on without
/// it (as decide_loss says for its loss): they re-form and it leaves the job. Otherwise
/// (`rescale` false, empty text) the failure takes the usual way: a restart or the end.
LossDecision decide_quarantine(const ElasticPolicy& policy,
                               const std::vector<rdzv::NodeAssignment>& round, int node_rank,
                               int failed_in_a_row, int limit, int rescales_used);

/// A worker of this node failed in a round of `round_nodes` nodes. When a lost node could still
/// be survived (elastic, or spares taken), the failure may be that loss's consequence: a peer's
/// death breaks the collectives within milliseconds, its heartbeats are missed only after
/// `heartbeat_timeout`. How long to wait for the monitor's verdict on the other nodes before
/// treating it as this node's own failure (offered to the job, a restart): long enough for a peer
/// that died at the failure to be reported (its last heartbeat is read up to one interval late,
/// and the check runs once per interval). Zero where a loss would change nothing (a static job
/// without spares: either way the job cannot go on without that node) or there is no peer.
std::chrono::milliseconds loss_verdict_wait(const ElasticPolicy& policy, size_t round_nodes,
                                            std::chrono::milliseconds heartbeat_timeout,
                                            std::chrono::milliseconds heartbeat_interval);

/// The held failure's wait ended `late` after it was due. Later than one heartbeat interval means
/// this agent itself stood still (SIGSTOP, a host swapping): its monitor looked at no heartbeat
/// meanwhile, and on the store's host the other nodes' heartbeats queued during the stall land
/// all at once on resume, looking fresh. The verdict needs live time, so the hold is renewed, at
/// most `kMaxHoldRenewals` times (a stall that repeats cannot hold the failure for ever).
inline constexpr int kMaxHoldRenewals = 2;
bool renew_loss_verdict_hold(std::chrono::milliseconds late,
                             std::chrono::milliseconds heartbeat_interval, int renewals_used);

/// How this node joins the round that re-forms the job from `survivors` (old node ranks, in
/// order): the survivors keep their relative order and take the ranks 0..S-1, and the round is
/// complete as soon as all S have joined (no last-call wait). Empty plan when this node
/// (`old_rank`) is not a survivor.
std::optional<RoundPlan> reform_plan(const std::vector<int>& survivors, int old_rank);

/// The round a restart meets: as configured (c10d: whoever arrives; one of this round's nodes
/// may be why the workers failed, and gone), except that a static job keeps the ranks of the
/// round it restarts from (a spare may have replaced a node; its configured rank may be taken).
/// `left` (the round restarted from, if any) is watched by its leader while its nodes come back.
RoundPlan restart_plan(const RoundPlan& current, bool dynamic,
                       const std::optional<rdzv::RendezvousResult>& left);

/// The job's budgets as they stand once this node has joined a round.
struct Budgets {
  int restarts_used = 0;
  int rescales_used = 0;
  bool published = false;  // taken as the running nodes published them (a pending node's join)
};
/// A pending node takes the budgets the running nodes published (its own count holds the
/// restart whose round went on without it, which they gave back as a membership change: seed
/// 35); any other node keeps the larger of its own and the published figures (a fast rejoin
/// after a crash cannot start them afresh).
Budgets budgets_after_join(Budgets own, const rdzv::RendezvousResult& joined);

/// What the round a restart formed changes in the job's membership. Fewer nodes than the round
/// it left (elastic): the workers most likely failed because a peer vanished, so the restart
/// is a membership change: it counts against max_rescales and is given back. More nodes: the
/// restart admitted pending nodes (admit=restart), a membership change too.
enum class RestartChange { None, Loss, Admit };
RestartChange restart_change(int left_nodes, int joined_nodes, bool elastic);

/// What a re-form from `old_nodes` nodes to `survivors` + `admitted` is: "loss", "admit" (every
/// node stays, newcomers join) or "spare" (a spare replaced a lost node).
const char* change_kind(size_t old_nodes, size_t survivors, size_t admitted);

/// "0 (host-a), 2 (host-c)": node ranks and names of a round's nodes.
std::string describe_nodes(const std::vector<rdzv::NodeAssignment>& round,
                           const std::vector<int>& ranks);
/// "host-x (pending #3)": a pending node.
std::string describe_pending(const rdzv::JoinRequest& join);

}  // namespace ddp::launcher
