// SPDX-License-Identifier: MIT
#pragma once
/// EtcdSession: this agent's side of a job on etcd (--rdzv_backend etcd): the JobRendezvous
/// seam over an etcd v3 cluster instead of ddprun's own store. The round protocol (join, watch,
/// keepalive, stop key, pending nodes, exit barrier, leave) is rdzv::etcd::EtcdRoundProtocol
/// (rendezvous/etcd/etcd_round_protocol.hpp); this class owns the thread its blocking calls run
/// on, the workers' store of each attempt (the round's node 0 hosts it and the protocol announces
/// it), and the translation into the launcher's types (stop reasons, node losses, results).
///
/// Threads: blocking etcd calls run on one rendezvous thread (as NodeSession's); the protocol's
/// keepalive and watch on their own. Results and events are posted to the agent's loop.

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "launcher/multinode/job_rendezvous.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_round_protocol.hpp"

namespace ddp::launcher {

class HostedStore;

class EtcdSession final : public JobRendezvous {
 public:
  EtcdSession(boost::asio::io_context& agent_io, MultiNodeSettings settings, Events events);
  ~EtcdSession() override;
  EtcdSession(const EtcdSession&) = delete;
  EtcdSession& operator=(const EtcdSession&) = delete;

  bool busy() const override { return busy_; }
  void cancel_waits() override { protocol_->cancel(); }
  void join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) override;
  void broadcast_stop(const StopReason& reason) override;
  void settle_stop(const StopReason& reason, std::function<void(StopReason)> done) override;
  void answer_pending(const PendingAnswer& answer) override;
  void note_progress(long long events, std::optional<long long> best_step,
                     bool all_started) override;
  /// Kept for the protocol's keepalive, which puts it under the round's view key when it changed.
  void note_view(std::string record) override;
  void exit_barrier(std::function<void(BarrierResult)> done) override;
  void leave(bool wait_for_others, std::function<void()> then) override;
  bool detach_if_blocked() override;

 private:
  void on_loop(std::function<void()> f);
  rdzv::etcd::EtcdRoundProtocol::Callbacks callbacks();
  // Node 0 of a formed round: the workers' store of this attempt ({address, port}).
  std::pair<std::string, int> host_store();

  boost::asio::io_context& agent_io_;
  MultiNodeSettings settings_;
  Events events_;
  rdzv::etcd::ClientCluster cluster_;
  std::unique_ptr<rdzv::etcd::EtcdRoundProtocol> protocol_;
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<HostedStore> store_;  // the workers' store of this attempt (node 0)
  std::atomic<bool> busy_{false};
  std::thread thread_;
};

}  // namespace ddp::launcher
