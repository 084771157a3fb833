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
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "launcher/multinode/multinode_settings.hpp"
#include "rendezvous/node_rendezvous.hpp"

namespace ddp::launcher {

/// A stop broadcast carries the root cause: "<exit code>|<description>".
struct StopReason {
  int exit_code = 1;
  std::string text;  // "node 1 (host-b): rank 3 (pid 42) exited with code 1"
};
std::string encode_stop_reason(const StopReason& reason);
StopReason decode_stop_reason(const std::string& encoded);

class NodeSession {
 public:
  /// What the monitor reports; delivered on the agent's loop.
  struct Events {
    std::function<void(const StopReason&)> on_stop;
    std::function<void(const std::string& message)> on_lost;  // a node or the store is gone
  };
  using JoinResult = std::variant<rdzv::RendezvousResult, std::string /* error */>;
  /// How the exit barrier ended: both empty = every node finished (or the wait was cancelled).
  struct BarrierResult {
    std::optional<StopReason> stop;   // a stop arrived meanwhile: the job failed elsewhere
    std::optional<std::string> lost;  // the store stopped answering: exit 74, no restart
  };

  NodeSession(boost::asio::io_context& agent_io, MultiNodeSettings settings,
              rdzv::StoreClientOptions store, Events events);
  ~NodeSession();
  /// Never blocks: a thread still inside a blocking call is detached (see the .cpp).
  static void dispose(std::unique_ptr<NodeSession> session);
  NodeSession(const NodeSession&) = delete;
  NodeSession& operator=(const NodeSession&) = delete;

  const MultiNodeSettings& settings() const { return settings_; }
  /// True while a blocking call runs on the rendezvous thread (a join can take join_timeout).
  bool busy() const { return busy_; }
  /// Ends a running exit barrier or leave wait early (from the loop: a node was lost).
  void cancel_waits() { cancel_ = true; }

  /// Joins round `round` (= restart count) and, once joined, starts heartbeats.
  void join(int round, std::function<void(JoinResult)> done);
  /// Tells every node to stop (first reason wins). Fire and forget.
  void broadcast_stop(const StopReason& reason);
  /// Waits until every node of the round finished its workers, or a stop arrived.
  void exit_barrier(std::function<void(BarrierResult)> done);
  /// The store host waits (bounded by the heartbeat timeout) until every other node has left,
  /// so that nobody loses the store before reading the final stop reason.
  void leave(bool wait_for_others, std::function<void()> then);

 private:
  void on_loop(std::function<void()> f);
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
  rdzv::NodeRendezvousOptions round_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace ddp::launcher
