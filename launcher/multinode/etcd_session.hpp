// SPDX-License-Identifier: MIT
#pragma once
/// EtcdSession: this agent's side of a job on etcd (--rdzv_backend etcd): the JobRendezvous
/// seam over an etcd v3 cluster instead of ddprun's own store. The job's durable state (rounds,
/// stop reasons, the exit barrier) lives in etcd; this node's liveness is an etcd lease that
/// keepalives renew; the other nodes' losses arrive through a watch on the round's keys. Every
/// decision two agents could race on is one txn on the round record or the stop key
/// (rendezvous/etcd/etcd_round.hpp), so there is never a second winner. The workers' store is
/// per attempt: the round's node 0 hosts it and announces it in etcd.
///
/// Threads: blocking etcd calls run on one rendezvous thread (as NodeSession's); keepalives on
/// one more; the watch on its own. Results and events are posted to the agent's loop.

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "launcher/multinode/job_rendezvous.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_round.hpp"

namespace ddp::launcher {

class HostedStore;

class EtcdSession final : public JobRendezvous {
 public:
  EtcdSession(boost::asio::io_context& agent_io, MultiNodeSettings settings, Events events);
  ~EtcdSession() override;
  EtcdSession(const EtcdSession&) = delete;
  EtcdSession& operator=(const EtcdSession&) = delete;

  bool busy() const override { return busy_; }
  void cancel_waits() override { cancel_ = true; }
  void join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) override;
  void broadcast_stop(const StopReason& reason) override;
  void settle_stop(const StopReason& reason, std::function<void(StopReason)> done) override;
  void answer_pending(const PendingAnswer& answer) override;
  void note_progress(long long events, std::optional<long long> best_step,
                     bool all_started) override;
  /// Kept for the keepalive thread, which puts it under the round's view key when it changed.
  void note_view(std::string record) override;
  void exit_barrier(std::function<void(BarrierResult)> done) override;
  void leave(bool wait_for_others, std::function<void()> then) override;
  bool detach_if_blocked() override;

 private:
  void on_loop(std::function<void()> f);
  void report_etcd_lost(const std::string& why);
  // Rendezvous thread:
  // Offers `reason` as the round's stop reason (first valid one wins); the reason the key holds
  // afterwards, or `reason` when etcd could not be asked (the loss is reported).
  StopReason offer_stop(const StopReason& reason);
  rdzv::RendezvousResult join_round(int round, const RoundPlan& plan);
  // Marks this node as left (in a formed round) and revokes its lease: once, bounded (1 s).
  void leave_etcd();
  // The rest of a join once `formed` (nullopt: it formed without this node) is known.
  rdzv::RendezvousResult join_formed(int round,
                                     const std::optional<rdzv::etcd::RoundRecord>& formed);
  // The closed round with this node in it; nullopt when it closed without this node.
  std::optional<rdzv::etcd::RoundRecord> form_round(int round, const RoundPlan& plan);
  // Round `round`'s record once closed (nullopt: none, not the job's, or still open).
  std::optional<rdzv::etcd::RoundRecord> read_round(int round);
  // Who of the round left is lost, when too few are left for `current` to form (see
  // rdzv::etcd::lost_before_forming); nullopt: it may still form.
  std::optional<std::string> lost_in_round(const rdzv::etcd::RoundRecord& previous,
                                           int previous_round,
                                           const rdzv::etcd::RoundRecord& current);
  // A node that arrived after its round closed waits under the job's pending keys until the
  // running nodes invite it (or refuse it, or `deadline` passes: RendezvousError).
  // `round`: the round that formed without it (the job's nodes are there or in a later one).
  // nullopt: no member of the job stayed alive for a lease's lifetime (the job ended, e.g. all
  // its agents were killed): this node begins the next generation, as after a clean finish.
  std::optional<rdzv::etcd::Invitation> wait_as_pending(
      int round, std::chrono::steady_clock::time_point deadline);
  // Whether any node has an alive key in round `from_round` or a later one (the job still runs).
  bool job_has_live_member(int from_round);
  void seed_pending_board();
  void announce_or_find_store(int round, rdzv::RendezvousResult& joined);
  void start_lease();
  // Whether etcd no longer has this node's lease (it expired while this node was stopped or cut
  // off); asks etcd.
  bool lease_gone();
  // A new lease in place of one that ended while this node waited, said in one line.
  void renew_lease();
  // The first join of this agent: the job's current generation, or the next one when the last
  // generation under this id has ended (a finished job re-run with the same id).
  void choose_generation();
  rdzv::etcd::ClientOptions client_options() const;
  void note(std::string line);
  void start_watch(int round, std::int64_t from_revision, const rdzv::etcd::RoundRecord& closed);
  void stop_round();
  // Watch thread:
  void on_watch(int round, const rdzv::etcd::RoundRecord& closed,
                const rdzv::etcd::WatchMessage& message);
  // Reports the live pending nodes when they changed (under watch_mutex_).
  void report_pending_if_changed();
  // The watch's (and the keepalive's) liveness: reads the watched round's keys now (its alive,
  // stop and done keys) and takes them as the watch would have (an alive key gone is a loss);
  // the read's revision, 0 when no round is watched. On the calling thread's own client.
  std::int64_t reread_round(rdzv::etcd::EtcdClient& client);

  boost::asio::io_context& agent_io_;
  MultiNodeSettings settings_;
  rdzv::etcd::JobKeys keys_;
  Events events_;
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  // Rendezvous thread only:
  std::unique_ptr<rdzv::etcd::EtcdClient> client_;
  std::unique_ptr<HostedStore> store_;  // the workers' store of this attempt (node 0)
  std::unique_ptr<rdzv::etcd::EtcdWatch> watch_;
  std::optional<rdzv::RendezvousResult> joined_;
  rdzv::etcd::RoundRecord closed_round_;  // the round joined_ is in, as it closed
  // Keepalives (their own thread and client):
  std::atomic<std::int64_t> lease_{0};
  std::chrono::seconds lease_ttl_{0};  // the TTL etcd granted (may exceed the one asked)
  std::atomic<bool> ttl_warned_{false};
  // The keepalive thread found the lease gone while this node was not in a formed round: the
  // join renews it (not a loss: nobody counted on this node yet).
  std::atomic<bool> lease_ended_{false};
  bool generation_chosen_ = false;
  std::atomic<bool> ever_formed_{false};  // a round formed with this node in it
  std::thread keepalive_;
  std::mutex keepalive_mutex_;
  std::condition_variable keepalive_wake_;
  bool keepalive_stop_ = false;
  std::atomic<bool> etcd_lost_{false};   // reported once
  std::atomic<bool> in_barrier_{false};  // in the exit barrier: workers succeeded here
  std::atomic<bool> revoked_{false};     // leave_etcd ran
  // This node's progress (note_progress, on the agent's loop), published by the keepalive thread
  // under the round's progress key when it changed; round -1: not in a round.
  std::atomic<long long> progress_events_{0};
  std::atomic<bool> all_started_{false};
  std::atomic<long long> best_step_{0};
  std::atomic<bool> has_best_step_{false};
  std::atomic<int> publish_round_{-1};
  std::atomic<int> publish_rank_{-1};
  // Shared with the watch thread (under watch_mutex_):
  std::mutex watch_mutex_;
  std::optional<std::pair<int, rdzv::etcd::RoundRecord>> watched_;  // the round the watch covers
  std::map<int, std::int64_t> done_ranks_;  // node rank -> revision its done key was seen at
  std::set<int> lost_ranks_;
  std::set<int> left_ranks_;  // node ranks that marked they left (then revoked their lease)
  bool stop_seen_ = false;
  rdzv::etcd::PendingBoard pending_;
  std::vector<std::int64_t> reported_pending_;
  std::map<int, rdzv::NodeProgress> progress_seen_;  // the other members' last progress
  std::map<int, std::string> views_seen_;            // the other members' view records
  /// Tells the Agent every other member's view record and lost state (under watch_mutex_).
  void report_views(const rdzv::etcd::RoundRecord& closed, int my_rank);
  std::mutex view_mutex_;
  std::string view_record_;  // note_view's, guarded by view_mutex_
  std::atomic<bool> busy_{false};
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace ddp::launcher
