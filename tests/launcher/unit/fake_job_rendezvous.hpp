// SPDX-License-Identifier: MIT
#pragma once
/// FakeJobRendezvous: a scripted stand-in for the other nodes and the store, so that the Agent's
/// multi-node decisions (job stop, node loss, the finishing phase) are tested without sockets or
/// timing. Like NodeSession, every result and event is posted to the Agent's loop, never
/// delivered inline; a test queues news for a round with `on_round` and it arrives right after
/// the Agent has started that round's workers.

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launcher/multinode/job_rendezvous.hpp"

namespace ddp::launcher::testing {

/// A round as this node would see it: `nodes` nodes of `local` workers each, this one at `rank`.
inline rdzv::RendezvousResult round_of(int rank, int nodes, int local) {
  rdzv::RendezvousResult r;
  r.node_rank = rank;
  r.num_nodes = nodes;
  r.local_world_size = local;
  r.world_size = nodes * local;
  r.base_rank = rank * local;
  for (int n = 0; n < nodes; ++n) {
    r.assignment.nodes.push_back({n, "node" + std::to_string(n), local, n * local, n + 1});
  }
  r.assignment.world_size = r.world_size;
  return r;
}

class FakeJobRendezvous final : public JobRendezvous {
 public:
  struct Script {
    /// The join's outcome per round (default: node 0 of a one-node job).
    std::function<JoinResult(int round, const RoundPlan& plan)> join;
    /// What the join reports before its result (waiting as pending, a lost store), in order.
    std::function<void(FakeJobRendezvous&, int round)> while_joining;
    /// What happens while round N runs: called on the loop right after the join's result, so
    /// after the Agent started the workers. Use deliver_stop / deliver_loss from here.
    std::function<void(FakeJobRendezvous&, int round)> on_round;
    /// The exit barrier's outcome per round (default: every node finished); may deliver news
    /// first (it reaches the Agent before the barrier's result).
    std::function<BarrierResult(FakeJobRendezvous&, int round)> barrier;
  };

  FakeJobRendezvous(boost::asio::io_context& loop, Events events, Script script)
      : loop_(loop), events_(std::move(events)), script_(std::move(script)) {}

  // What the Agent did, in order.
  std::vector<int> joins;
  std::vector<RoundPlan> plans;  // how each round was joined
  std::vector<StopReason> broadcasts;
  std::vector<int> barriers;  // round of each exit_barrier call
  std::vector<bool> leaves;   // wait_for_others of each leave call
  std::vector<PendingAnswer> answers;
  int cancels = 0;

  bool busy() const override { return false; }
  void cancel_waits() override { ++cancels; }

  void join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) override {
    joins.push_back(round);
    plans.push_back(plan);
    round_ = round;
    stop_in_store_.reset();  // each round meets under fresh keys
    JoinResult result = script_.join ? script_.join(round, plan) : JoinResult{round_of(0, 1, 1)};
    if (script_.while_joining) script_.while_joining(*this, round);
    // The round joined is the one asked for, unless the script says otherwise (a pending node
    // invited into a later round).
    if (auto* joined = std::get_if<rdzv::RendezvousResult>(&result); joined && joined->round == 0)
      joined->round = round;
    boost::asio::post(loop_, [done = std::move(done), result] { done(result); });
    if (auto* joined = std::get_if<rdzv::RendezvousResult>(&result); joined && script_.on_round) {
      round_ = joined->round;
      boost::asio::post(loop_, [this, r = joined->round] { script_.on_round(*this, r); });
    }
  }

  void broadcast_stop(const StopReason& reason) override {
    broadcasts.push_back(reason);
    // The store keeps the first reason; the monitor reports it to every node, this one included.
    if (!stop_in_store_) {
      stop_in_store_ = reason;
      deliver_stop(reason);
    }
  }

  void settle_stop(const StopReason& reason, std::function<void(StopReason)> done) override {
    StopReason winner = stop_in_store_ ? *stop_in_store_ : reason;
    broadcast_stop(reason);
    boost::asio::post(loop_, [done = std::move(done), winner] { done(winner); });
  }

  void answer_pending(const PendingAnswer& answer) override { answers.push_back(answer); }

  void exit_barrier(std::function<void(BarrierResult)> done) override {
    barriers.push_back(round_);
    BarrierResult result =
        script_.barrier ? script_.barrier(*this, round_) : BarrierResult{AllNodesDone{}};
    boost::asio::post(loop_, [done = std::move(done), result] { done(result); });
  }

  void leave(bool wait_for_others, std::function<void()> then) override {
    leaves.push_back(wait_for_others);
    boost::asio::post(loop_, std::move(then));
  }

  /// Another node's failure reached the store first (then this node's broadcast loses).
  void deliver_stop(const StopReason& reason) {
    if (!stop_in_store_) stop_in_store_ = reason;
    boost::asio::post(loop_, [this, reason] { events_.on_stop(reason); });
  }
  /// Another node's reason reached the store, but this node's monitor has not seen it yet.
  void store_stop_unseen(const StopReason& reason) {
    if (!stop_in_store_) stop_in_store_ = reason;
  }
  void deliver_waiting(const std::string& role) {
    boost::asio::post(loop_, [this, role] { events_.on_waiting(role); });
  }
  void deliver_loss(const NodeLoss& loss) {
    boost::asio::post(loop_, [this, loss] { events_.on_lost(loss); });
  }
  /// News that reaches the Agent `after` from now: e.g. the monitor's verdict on a peer whose
  /// death made this node's workers fail first (it comes a heartbeat timeout later).
  void deliver_later(std::chrono::milliseconds after,
                     std::function<void(FakeJobRendezvous&)> news) {
    auto timer = std::make_shared<boost::asio::steady_timer>(loop_, after);
    timer->async_wait([this, timer, news = std::move(news)](const boost::system::error_code& ec) {
      if (!ec) news(*this);
    });
  }
  /// The monitor's list of live pending nodes changed.
  void deliver_pending(const std::vector<rdzv::JoinRequest>& pending) {
    boost::asio::post(loop_, [this, pending] { events_.on_pending(pending); });
  }

 private:
  boost::asio::io_context& loop_;
  Events events_;
  Script script_;
  int round_ = -1;
  std::optional<StopReason> stop_in_store_;
};

}  // namespace ddp::launcher::testing
