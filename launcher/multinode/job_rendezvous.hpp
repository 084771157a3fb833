// SPDX-License-Identifier: MIT
#pragma once
/// JobRendezvous: the seam between the Agent (which decides) and the multi-node machinery (which
/// talks to the store and the other nodes). NodeSession is the real implementation; the unit
/// tests drive the Agent through FakeJobRendezvous (tests/launcher/unit), so that job stop, node
/// loss and the finishing phase are tested without sockets or timing.
///
/// Every callback runs on the Agent's loop (the io_context given to the factory), never inline
/// from the call that started the operation.

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "rendezvous/node_rendezvous.hpp"

namespace ddp::launcher {

/// The job-wide root cause a node broadcasts when one of its workers fails; the first reason in
/// the store wins and every node adopts it.
/// The same key also carries a membership change: a node was lost and the job re-forms from
/// `survivors` (node ranks of the round, in order) instead of failing.
struct StopReason {
  int exit_code = 1;
  int node_rank = -1;          // the node that broadcast it (-1: not known, e.g. an older agent)
  std::string text;            // "node 1 (host-b): rank 3 (pid 42) failed with exit code 1"
  std::vector<int> survivors;  // non-empty: a re-form, not a failure
  // A re-form that admits pending nodes (arrivals, spares): their pending numbers, in the order
  // they take the node ranks after the survivors'. Only the winning re-form's invitations count.
  std::vector<std::int64_t> admitted{};
};

/// What the running nodes tell a pending node besides an invitation into a re-form (which
/// travels with broadcast_stop).
struct PendingAnswer {
  enum class Kind {
    Spare,    // the job is full: it waits as a spare (it replaces the next lost node)
    Refused,  // it will not be admitted (`reason`): it ends
    Restart,  // it joins round `round` as configured, with the nodes of a restart
  };
  Kind kind = Kind::Spare;
  std::int64_t seq = 0;
  std::string reason;
  int round = 0;
};

/// How to join the next round. Default: as configured (--nnodes, --node_rank or on arrival).
/// A re-form pins the round: exactly `nodes` nodes, this one at `node_rank`, complete as soon as
/// all have joined, and bounded by `join_timeout` (a survivor that vanished meanwhile must not
/// hold the others for the configured join timeout).
struct RoundPlan {
  int nodes = 0;  // 0: as configured
  int node_rank = -1;
  std::chrono::milliseconds join_timeout{0};  // 0: as configured
  // The job's budgets used so far, kept in the store for nodes that join later (a newcomer or a
  // fast rejoin counts from these, not from zero). Published only by a node that joined before.
  int restarts_used = 0;
  int rescales_used = 0;
  // A re-form: the round left and each survivor's node rank in it, in the new order (the
  // rendezvous may fail at once when one of them is gone too; rdzv::NodeRendezvousOptions).
  int previous_round = -1;
  std::vector<int> survivors_previous_ranks;
  // A restart: this node's rank in `previous_round` and that round's size (the leader ends the
  // round at once, as a node loss, when too few of its nodes are left to meet; see
  // rdzv::NodeRendezvousOptions::previous_node_rank).
  int previous_node_rank = -1;
  int previous_round_nodes = 0;
};

/// A node, or the store itself, stopped answering.
struct NodeLoss {
  std::string text;              // "lost node 2 (host-c): no heartbeat for 5 s"
  std::optional<int> node_rank;  // nullopt: the store (and with it the job's state) is gone
  // This node itself was taken for lost (etcd dropped its lease after its round formed): `text`
  // is the whole line, the same whether the join or the monitor met it (exit 74).
  bool dropped = false;
};

/// The exit barrier ended because every node of the round finished its workers.
struct AllNodesDone {};

class JobRendezvous {
 public:
  /// What the other nodes do to this one while a round runs.
  struct Events {
    std::function<void(const StopReason&)> on_stop;
    std::function<void(const NodeLoss&)> on_lost;
    /// The live pending nodes not yet answered changed (see rdzv::NodeMonitor).
    std::function<void(const std::vector<rdzv::JoinRequest>&)> on_pending;
    /// This node arrived after its round closed and waits as "pending", or was told it is a
    /// "spare" (during a join).
    std::function<void(const std::string& role)> on_waiting;
    /// A join found something worth a warning line (the default --rdzv_id's program differs).
    std::function<void(const std::string& text)> on_warning;
    /// A join still waits for other nodes (every few seconds): how long, who arrived, who not.
    std::function<void(std::chrono::milliseconds waited, const std::string& status)>
        on_join_progress;
    /// Another node's ranks made progress (optional; for the job-wide hang verdict). `best_step`:
    /// the highest step any other node reported in this round; `others_started`: every other
    /// node said all its ranks have started (docs/health.md, the hang verdict).
    std::function<void(std::optional<long long> best_step, bool others_started)>
        on_progress_elsewhere;
    /// The other nodes' records for the job-wide view and whether each is lost (optional: set
    /// only where someone may look, i.e. --status-port; see launcher/health/job_view.hpp).
    std::function<void(const std::vector<rdzv::NodeView>& others)> on_node_views;
    /// One line for the user about the rendezvous itself (optional): e.g. this node joined again
    /// with a new etcd lease, a re-run job began a new generation, etcd granted another TTL.
    std::function<void(const std::string& line)> on_note;
  };
  /// A NodeLoss: the round could not form because nodes of the round before were lost meanwhile.
  using JoinResult = std::variant<rdzv::RendezvousResult, std::string /* error */, NodeLoss>;
  /// How the exit barrier ended. A cancelled barrier (cancel_waits) reports AllNodesDone: the
  /// caller cancelled because it already knows better.
  using BarrierResult = std::variant<AllNodesDone, StopReason, NodeLoss>;

  virtual ~JobRendezvous() = default;

  /// True while a blocking call is in progress (a join can take join_timeout).
  virtual bool busy() const = 0;
  /// Ends a running exit barrier or leave wait early.
  virtual void cancel_waits() = 0;
  /// Joins round `round` (= restart count) as `plan` says and, once joined, watches the other
  /// nodes. A join that fails because the store cannot be reached reports the store's loss
  /// (Events::on_lost, no node rank) before its error.
  virtual void join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) = 0;
  /// Tells every node to stop (first reason wins). Fire and forget.
  /// A re-form's winning broadcast also invites its `admitted` pending nodes.
  virtual void broadcast_stop(const StopReason& reason) = 0;
  /// Offers `reason` as the job's stop reason like broadcast_stop, then calls `done` on the loop
  /// with the reason the store holds: `reason` when it won, the earlier one when another node's
  /// came first (or `reason` when the store could not be asked). For a node about to end on its
  /// own failure: the others may have offered theirs in the same moment, and every node must
  /// name the one that won.
  virtual void settle_stop(const StopReason& reason, std::function<void(StopReason)> done) = 0;
  /// Answers a pending node. Fire and forget.
  virtual void answer_pending(const PendingAnswer& answer) = 0;
  /// This node's progress in the current round (progress events so far, the local ranks' highest
  /// step, whether every live local rank has shown progress), for the other nodes; published on
  /// the next heartbeat. Called on every progress event, so it only records. A new round starts
  /// again from none.
  virtual void note_progress(long long /*events*/, std::optional<long long> /*best_step*/,
                             bool /*all_started*/) {}
  /// This node's record for the other nodes' job-wide view (launcher/health/job_view.hpp),
  /// published on the next heartbeat when it changed. A new round starts again from none.
  virtual void note_view(std::string /*record*/) {}
  /// Waits until every node of the round finished its workers, a stop arrived, or the store
  /// went away.
  virtual void exit_barrier(std::function<void(BarrierResult)> done) = 0;
  /// Leaves the job. The store's host waits (bounded) until the others have left, so that nobody
  /// loses the store before reading the final outcome. `then` runs on the loop afterwards.
  virtual void leave(bool wait_for_others, std::function<void()> then) = 0;
  /// At ddprun's exit: true when the implementation is still blocked in a network call and has
  /// detached itself to end with the process; the caller must then release, not destroy, it.
  virtual bool detach_if_blocked() { return false; }
};

/// Ends `session` without ever blocking ddprun's exit.
inline void dispose(std::unique_ptr<JobRendezvous> session) {
  if (session && session->detach_if_blocked()) (void)session.release();
}

/// Makes the job's rendezvous on the Agent's loop; the Agent passes its event handlers.
using JobRendezvousFactory = std::function<std::unique_ptr<JobRendezvous>(
    boost::asio::io_context& loop, JobRendezvous::Events events)>;

}  // namespace ddp::launcher
