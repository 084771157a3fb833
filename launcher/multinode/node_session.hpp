// SPDX-License-Identifier: MIT
#pragma once
/// NodeSession: this agent's side of a multi-node job. Every blocking store call (join, stop
/// broadcast, exit barrier) runs on one dedicated rendezvous thread; results and the monitor's
/// events are posted back to the agent's loop, so the loop never blocks on the network.

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "launcher/multinode/job_rendezvous.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "rendezvous/node_rendezvous.hpp"

namespace ddp::launcher {

/// A stop broadcast carries the root cause: "<exit code>|<node rank>|<description>", or for a
/// re-form "<exit code>|<node rank>|rescale=<survivor>,<survivor>...|<description>", with
/// "admit=<pending>,<pending>...|" before the description when it admits pending nodes.
std::string encode_stop_reason(const StopReason& reason);
StopReason decode_stop_reason(const std::string& encoded);

/// The real JobRendezvous: the store client, the join and the heartbeat monitor.
class NodeSession final : public JobRendezvous {
 public:
  NodeSession(boost::asio::io_context& agent_io, MultiNodeSettings settings,
              rdzv::StoreClientOptions store, Events events);
  ~NodeSession() override;
  /// A thread still inside a blocking call is detached (see the .cpp).
  bool detach_if_blocked() override;
  NodeSession(const NodeSession&) = delete;
  NodeSession& operator=(const NodeSession&) = delete;

  const MultiNodeSettings& settings() const { return settings_; }
  /// True while a blocking call runs on the rendezvous thread (a join can take join_timeout).
  bool busy() const override { return busy_; }
  /// Ends a running exit barrier or leave wait early (from the loop: a node was lost).
  void cancel_waits() override { cancel_ = true; }

  /// Joins round `round` (= restart count) and, once joined, starts heartbeats.
  void join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) override;
  /// Tells every node to stop (first reason wins). Fire and forget.
  void broadcast_stop(const StopReason& reason) override;
  void settle_stop(const StopReason& reason, std::function<void(StopReason)> done) override;
  void answer_pending(const PendingAnswer& answer) override;
  /// Recorded for the monitor's next heartbeat (atomics: the monitor runs on its own thread).
  void note_progress(long long events, std::optional<long long> best_step,
                     bool all_started) override;
  /// Kept for the monitor's next heartbeat (under a mutex: the monitor runs on its own thread).
  void note_view(std::string record) override;
  /// Waits until every node of the round finished its workers, or a stop arrived.
  void exit_barrier(std::function<void(BarrierResult)> done) override;
  /// The store host waits (bounded by the heartbeat timeout) until every other node has left,
  /// so that nobody loses the store before reading the final stop reason.
  void leave(bool wait_for_others, std::function<void()> then) override;

 private:
  void on_loop(std::function<void()> f);
  /// The client of the exit barrier and leave, on store_ (rendezvous thread).
  /// The rendezvous options of `round`: the job's settings, pinned by `plan` (a re-form's nodes
  /// and order, a restart's previous round). Pure over the settings and whether this node has
  /// taken part before (its budgets are then published).
  rdzv::NodeRendezvousOptions round_options(int round, const RoundPlan& plan) const;
  /// The round's news during the join (waiting, warnings, progress), handed to the Agent's loop.
  void forward_round_news();
  /// Joins round_ (on the session's thread): the round, a loss of its nodes, or the error.
  JoinResult join_round();
  void open_client();
  /// Heartbeats and watching the round's nodes on store_ (rendezvous thread; joined_ is set).
  void start_monitor();
  bool keep_waiting() const { return !cancel_; }

  boost::asio::io_context& agent_io_;
  MultiNodeSettings settings_;
  rdzv::StoreClientOptions store_;
  Events events_;
  boost::asio::io_context io_{1};  // the rendezvous thread's queue
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  // Touched only on the rendezvous thread:
  std::unique_ptr<rdzv::StoreClient> client_;
  std::unique_ptr<rdzv::NodeMonitor> monitor_;
  std::optional<rdzv::RendezvousResult> joined_;
  int monitor_generation_ = 0;  // generation_ of the join whose round the monitor watches
  rdzv::NodeRendezvousOptions round_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> cancel_{false};
  // Counts joins (on the loop): a pending list that the previous round's monitor posted after
  // the next join began is stale (it may name nodes just invited) and is dropped.
  int generation_ = 0;
  // This round's progress (note_progress, from the loop), read by the monitor's thread.
  std::atomic<long long> progress_events_{0};
  std::atomic<bool> all_started_{false};
  std::atomic<bool> has_best_step_{false};
  std::atomic<long long> best_step_{0};
  std::mutex view_mutex_;
  std::string view_record_;  // note_view's, guarded by view_mutex_
  std::thread thread_;
};

}  // namespace ddp::launcher
