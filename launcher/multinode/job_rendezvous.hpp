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
};

/// How to join the next round. Default: as configured (--nnodes, --node_rank or on arrival).
/// A re-form pins the round: exactly `nodes` nodes, this one at `node_rank`, complete as soon as
/// all have joined, and bounded by `join_timeout` (a survivor that vanished meanwhile must not
/// hold the others for the configured join timeout).
struct RoundPlan {
  int nodes = 0;  // 0: as configured
  int node_rank = -1;
  std::chrono::milliseconds join_timeout{0};  // 0: as configured
};

/// A node, or the store itself, stopped answering.
struct NodeLoss {
  std::string text;              // "lost node 2 (host-c): no heartbeat for 5 s"
  std::optional<int> node_rank;  // nullopt: the store (and with it the job's state) is gone
};

/// The exit barrier ended because every node of the round finished its workers.
struct AllNodesDone {};

class JobRendezvous {
 public:
  /// What the other nodes do to this one while a round runs.
  struct Events {
    std::function<void(const StopReason&)> on_stop;
    std::function<void(const NodeLoss&)> on_lost;
    /// Another node's ranks made progress (optional; for the job-wide hang verdict). `best_step`:
    /// the highest step any other node reported in this round.
    std::function<void(std::optional<long long> best_step)> on_progress_elsewhere;
  };
  using JoinResult = std::variant<rdzv::RendezvousResult, std::string /* error */>;
  /// How the exit barrier ended. A cancelled barrier (cancel_waits) reports AllNodesDone: the
  /// caller cancelled because it already knows better.
  using BarrierResult = std::variant<AllNodesDone, StopReason, NodeLoss>;

  virtual ~JobRendezvous() = default;

  /// True while a blocking call is in progress (a join can take join_timeout).
  virtual bool busy() const = 0;
  /// Ends a running exit barrier or leave wait early.
  virtual void cancel_waits() = 0;
  /// Joins round `round` (= restart count) as `plan` says and, once joined, watches the other
  /// nodes.
  virtual void join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) = 0;
  /// Tells every node to stop (first reason wins). Fire and forget.
  virtual void broadcast_stop(const StopReason& reason) = 0;
  /// This node's progress in the current round (progress events so far, the local ranks' highest
  /// step), for the other nodes; published on the next heartbeat. Called on every progress event,
  /// so it only records. A new round starts again from none.
  virtual void note_progress(long long /*events*/, std::optional<long long> /*best_step*/) {}
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
