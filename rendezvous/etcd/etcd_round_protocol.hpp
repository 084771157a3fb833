#pragma once

// EtcdRoundProtocol: one agent's side of a job's rounds on etcd (--rdzv_backend etcd), the etcd
// counterpart of c10d's join_rendezvous / NodeMonitor / exit_barrier / leave_round
// (node_rendezvous.hpp): a join that returns a result, a monitor (a watch on the job's keys and a
// keepalive thread) that reports through callbacks, the stop key, the pending nodes' answers, the
// exit barrier and leaving. The job's durable state lives in etcd; this node's liveness is an etcd
// lease that keepalives renew; the other nodes' losses arrive through the watch and the
// keepalive's once-per-heartbeat re-read. Every decision two agents could race on is one txn on
// the round record or the stop key (the pure decisions are in etcd_round.hpp).
//
// It talks to etcd only through the gateway seam (etcd_gateway.hpp), so its unit tests run on a
// fake cluster and a fake clock (Options::now; the fake's waits advance it). The caller (the
// launcher's EtcdSession) owns the thread that makes the blocking calls, the workers' store, and
// the translation into the launcher's types; stop reasons travel here as opaque payloads.
//
// Threads: join, offer_stop, invite, answer, exit_barrier and leave run on the caller's one
// rendezvous thread; the keepalive runs on a thread of its own (or, with
// Options::heartbeat_thread off, wherever beat() is called); the watch on the gateway's watch
// thread. Callbacks run on those threads.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "rendezvous/etcd/etcd_gateway.hpp"
#include "rendezvous/etcd/etcd_lease_fence.hpp"
#include "rendezvous/etcd/etcd_patient_gateway.hpp"
#include "rendezvous/etcd/etcd_round.hpp"
#include "rendezvous/node_rendezvous.hpp"

namespace ddp::rdzv::etcd {

// This node itself was taken for lost: its lease ended (it was stopped or cut off past the TTL)
// after a round formed with it, and the others went on (or ended) without it. A node loss (74),
// not a failed join: what() is the whole line, the same whether a join, the watch or the
// keepalive met it (EtcdRoundProtocol::dropped_line).
class NodeDroppedError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

class EtcdRoundProtocol {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    std::string prefix;     // the key prefix of every job (--rdzv_conf etcd_prefix)
    std::string run_id;     // --rdzv_id
    std::string token;      // every value is sealed with it (etcd_round.hpp: seal)
    std::string endpoints;  // as given, for error lines
    std::string node_name;
    int local_world_size = 1;
    int node_rank = -1;  // static: --node_rank; -1: on arrival
    AgreedSettings must_agree;
    int min_nodes = 1;
    int max_nodes = 1;
    bool dynamic = false;  // c10d-like: node ranks on arrival, late nodes wait as pending
    bool spares = false;   // static with spares: late nodes wait as pending too
    std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
    std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
    std::chrono::milliseconds read_timeout{std::chrono::seconds(60)};
    std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(1)};
    std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
    // The clock every bound is measured on (a test's fake clock).
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
    // How a join pauses between two tries while etcd elects a leader (a test's fake clock).
    std::function<void(std::chrono::milliseconds)> sleep = [](std::chrono::milliseconds d) {
      std::this_thread::sleep_for(d);
    };
    // false: no keepalive thread; the caller calls beat() once per heartbeat (a test).
    bool heartbeat_thread = true;
  };

  // How to join a round (the launcher's RoundPlan, the part the protocol reads).
  struct Ask {
    int nodes = 0;  // 0: as configured; else a pinned re-form of exactly `nodes`
    int node_rank = -1;
    std::chrono::milliseconds join_timeout{0};  // 0: as configured
    int restarts_used = 0;
    int rescales_used = 0;
    int previous_round = -1;  // a restart: the round left, and how many nodes it had
    int previous_round_nodes = 0;
  };

  struct Callbacks {
    std::function<void(const std::string& line)> on_note;
    std::function<void(std::chrono::milliseconds waited, const std::string& status)>
        on_join_progress;
    std::function<void(const std::string& role)> on_waiting;  // "pending", "spare"
    // A node (rank) or etcd itself (nullopt) was lost: once per node, once for etcd.
    std::function<void(const std::string& text, std::optional<int> node_rank)> on_lost;
    // This node itself was dropped (NodeDroppedError's line), met by the watch or the keepalive
    // in a formed round: once, instead of on_lost.
    std::function<void(const std::string& line)> on_dropped;
    // The round's stop key, as its payload (the launcher's stop-reason record); once per round.
    std::function<void(const std::string& payload)> on_stop;
    std::function<void(const std::vector<JoinRequest>& pending)> on_pending;
    std::function<void(std::optional<long long> best_step, bool others_started)>
        on_progress_elsewhere;
    std::function<void(const std::vector<NodeView>& others)> on_views;
    // Node 0 of a round that formed: host the workers' store of this attempt and say where it
    // listens ({address, port}); the protocol announces it to the others. Throws to fail the join.
    std::function<std::pair<std::string, int>()> host_store;
  };

  struct BarrierResult {
    enum class End { AllDone, Stopped, Lost };
    End end = End::AllDone;
    std::string stop;  // Stopped: the stop key's payload
    std::string loss;  // Lost: who did not arrive
  };

  EtcdRoundProtocol(EtcdCluster& cluster, Options options, Callbacks callbacks);
  // Stops the keepalive and the watch; leaves (a left key, the lease revoked) unless abandon()ed.
  ~EtcdRoundProtocol();
  EtcdRoundProtocol(const EtcdRoundProtocol&) = delete;
  EtcdRoundProtocol& operator=(const EtcdRoundProtocol&) = delete;

  // --- the rendezvous thread ---
  // Joins round `round` as `ask` says (or the round a pending node is invited to), starts the
  // watch and finds the workers' store (when the round's node 0 is lost before it announced it,
  // an elastic job's other nodes re-form the next round without it: the result's round says).
  // Throws EtcdUnavailable (etcd did not answer), RoundMembersLostError (too few of the round
  // before are left: a node loss), NodeDroppedError (this node's lease ended after a fixed-size
  // job's round formed with it) or RendezvousError.
  RendezvousResult join(int round, const Ask& ask);
  // Offers `payload` as the round's stop reason (the first valid one wins); the payload the key
  // holds afterwards, or `payload` when etcd could not be asked (etcd's loss is reported).
  std::string offer_stop(const std::string& payload);
  // A re-form that won: invites the `admitted` pending nodes into the next round of `nodes` nodes,
  // at node ranks from `first_rank` on.
  void invite(const std::vector<std::int64_t>& admitted, int nodes, int first_rank);
  // Answers pending node `seq`: it waits as a spare / is refused / joins round `round` (restart).
  void mark_spare(std::int64_t seq);
  void refuse(std::int64_t seq, const std::string& reason);
  void invite_restart(std::int64_t seq, int round);
  // This node's workers finished: waits until every node's did, a stop arrives, or a node that
  // did not arrive has lost its lease for heartbeat_timeout. etcd failing keeps the local result.
  BarrierResult exit_barrier();
  // Stops the monitor, marks this node as left and revokes its lease (bounded).
  void leave();

  // --- any thread ---
  // Ends a running wait (join, pending, barrier) early; clear_cancel() before the next one.
  void cancel() { cancel_ = true; }
  void clear_cancel() { cancel_ = false; }
  // The caller gives up on a blocked call (Ctrl-C): before its first round formed, the lease
  // goes now (bounded); the destructor then leaves nothing more.
  void abandon();
  // Reports etcd's loss (once; not in the exit barrier, where the local result stands).
  void report_etcd_lost(const std::string& why);
  void note_progress(long long events, std::optional<long long> best_step, bool all_started);
  void note_view(std::string record);

  // --- the keepalive thread (or a test) ---
  // One heartbeat: renews the lease (fencing as LeaseFence says), publishes progress and view,
  // and re-reads the watched round's keys. False when the keepalive ends (the lease ended before
  // a round formed, or etcd was reported lost).
  bool beat();

  // The lease this node holds (0: none yet); the TTL etcd granted.
  std::int64_t lease() const { return lease_; }
  std::chrono::seconds lease_ttl() const { return lease_ttl_; }
  const JobKeys& keys() const { return keys_; }

 private:
  Clock::time_point now() const { return options_.now(); }
  void note(const std::string& line);
  void end_round();
  std::optional<RoundRecord> form_round(int round, const Ask& ask);
  // form_round's steps: this node's write into the open round (whether its alive key was
  // written); the close, when close_step says it is due (whether it was tried); a restart's
  // check that enough of the round left are alive (RoundMembersLostError after a lease's TTL).
  RendezvousError not_formed_in_time(int round, const std::optional<RoundRecord>& current,
                                     const RoundShape& shape) const;
  // This node's lease ended while it joined: a new lease (nullopt), or lost_while_stopped.
  std::optional<RoundRecord> renew_unless_formed(int round,
                                                 const std::optional<RoundRecord>& current);
  bool write_join(int round, const Compare& same, const RoundRecord& next, const AliveKeys& alive);
  bool close_if_due(int round, const Compare& same, const RoundRecord& current,
                    const AliveKeys& alive, bool last_call_over);
  void check_restart_losses(int round, const Ask& plan, const RoundRecord& current,
                            std::optional<RoundRecord>& previous, Clock::time_point& too_few_since);
  RendezvousResult join_formed(int round, const std::optional<RoundRecord>& formed);
  // Node 0 of `closed` was lost before it announced the workers' store (`why`): the others
  // re-form round + 1 without it (an elastic job that keeps min_nodes), or RoundMembersLostError.
  RendezvousResult reform_without_store_host(int round, const RoundRecord& closed, int my_rank,
                                             const std::string& why);
  std::optional<RoundRecord> read_round(int round);
  std::optional<std::string> lost_in_round(const RoundRecord& previous, int previous_round,
                                           const RoundRecord& current);
  std::optional<Invitation> wait_as_pending(int round, Clock::time_point deadline);
  bool job_has_live_member(int from_round);
  void seed_pending_board();
  void announce_or_find_store(int round, RendezvousResult& joined);
  void start_lease();
  void stop_keepalive();
  bool lease_gone();
  // A job of a fixed size (min = max nodes, no spares) has no place for a node the others took
  // for lost.
  bool fixed_size() const { return options_.min_nodes == options_.max_nodes && !options_.spares; }
  // The one line for a node whose lease ended after `round` formed with it (74), whichever of
  // the join, the watch or the keepalive meets it; reported once (not in the exit barrier).
  std::string dropped_line(int round) const;
  NodeDroppedError lost_while_stopped(int round) const {
    return NodeDroppedError(dropped_line(round));
  }
  void report_dropped(int round);
  void renew_lease();
  void choose_generation();
  void leave_etcd();
  void put_answer(const std::string& key, const std::string& value);
  void start_watch(int round, std::int64_t from_revision, const RoundRecord& closed);
  void on_watch(int round, const RoundRecord& closed, const WatchMessage& message);
  // on_watch's steps, one kind of key each (`my_rank`: this node's rank in `closed`).
  void on_pending_event(const WatchEvent& e);
  void on_progress_put(int round, const RoundRecord& closed, std::optional<int> my_rank,
                       const KeyValue& kv);
  void on_view_put(int round, const RoundRecord& closed, std::optional<int> my_rank,
                   const KeyValue& kv);
  void on_stop_put(const KeyValue& kv);
  void on_alive_deleted(int round, const RoundRecord& closed, std::optional<int> my_rank,
                        const std::string& key, const WatchMessage& message);
  // exit_barrier's steps: one read of the round's keys; who arrived (a deleted done key the
  // watch saw still counts, said once per rank); the loss once a missing node's lease ended
  // for heartbeat_timeout (`gone_since`: when the first one was seen gone).
  struct BarrierRead {
    std::int64_t revision = 0;
    std::optional<std::string> stop;
    std::set<int> done;  // ranks whose done key is in etcd
    AliveKeys alive;
  };
  BarrierRead read_barrier(int round);
  std::set<int> arrived_at_barrier(int round, const BarrierRead& read, std::set<int>& told_deleted);
  std::optional<BarrierResult> barrier_loss(int round, const BarrierVerdict& verdict,
                                            Clock::time_point& gone_since);
  void report_pending_if_changed();
  void report_views(const RoundRecord& closed, int my_rank);
  std::int64_t reread_round(EtcdGateway& client);

  EtcdCluster& cluster_;
  Options options_;
  Callbacks callbacks_;
  JobKeys keys_;
  // The rendezvous thread's connection (every call bounded by min(read, heartbeat timeout));
  // during a join it waits out an election until the join's deadline.
  std::chrono::milliseconds call_timeout_;
  std::unique_ptr<PatientGateway> client_;
  std::unique_ptr<EtcdWatchStream> watch_;
  std::optional<RendezvousResult> joined_;
  RoundRecord closed_round_;  // the round joined_ is in, as it closed
  std::atomic<std::int64_t> lease_{0};
  std::chrono::seconds lease_ttl_{0};  // the TTL etcd granted (may exceed the one asked)
  std::atomic<bool> ttl_warned_{false};
  // The keepalive found the lease gone while this node was not in a formed round: the join
  // renews it (not a loss: nobody counted on this node yet).
  std::atomic<bool> lease_ended_{false};
  bool generation_chosen_ = false;
  std::atomic<bool> ever_formed_{false};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> abandoned_{false};
  // The keepalive's state (its thread, or the test calling beat()).
  struct Keepalive;
  std::unique_ptr<Keepalive> beat_;
  std::thread keepalive_;
  std::mutex keepalive_mutex_;
  std::condition_variable keepalive_wake_;
  bool keepalive_stop_ = false;
  std::atomic<bool> etcd_lost_{false};
  std::atomic<bool> in_barrier_{false};
  std::atomic<bool> revoked_{false};
  // This node's progress, published by the keepalive when it changed; round -1: not in a round.
  std::atomic<long long> progress_events_{0};
  std::atomic<bool> all_started_{false};
  std::atomic<long long> best_step_{0};
  std::atomic<bool> has_best_step_{false};
  std::atomic<int> publish_round_{-1};
  std::atomic<int> publish_rank_{-1};
  // Shared with the watch thread (under watch_mutex_):
  std::mutex watch_mutex_;
  std::optional<std::pair<int, RoundRecord>> watched_;
  std::map<int, std::int64_t> done_ranks_;  // node rank -> revision its done key was seen at
  std::set<int> lost_ranks_;
  std::set<int> left_ranks_;
  bool stop_seen_ = false;
  PendingBoard pending_;
  std::vector<std::int64_t> reported_pending_;
  std::map<int, NodeProgress> progress_seen_;
  std::map<int, std::string> views_seen_;
  // Nodes whose view record was over kMaxViewBytes this round: said once, then not shown (as on
  // c10d), however often their heartbeats rewrite it.
  std::set<int> oversized_views_;
  std::mutex view_mutex_;
  std::string view_record_;
};

}  // namespace ddp::rdzv::etcd
