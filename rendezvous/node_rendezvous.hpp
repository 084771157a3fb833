#pragma once

// Multi-node rendezvous for ddprun agents over the store: join (optionally with a shared token),
// rank assignment, heartbeats and a job-wide stop broadcast. Blocking API, one StoreClient
// connection per object; see docs/rendezvous.md for the key layout.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rendezvous/rank_assignment.hpp"
#include "rendezvous/store_client.hpp"

namespace ddp::rdzv {

struct NodeRendezvousOptions {
  std::string run_id = "none";  // keeps jobs sharing one store apart (--rdzv_id)
  int round = 0;                // restart count: each restart meets under fresh keys
  // Shared secret (DDPRUN_RDZV_TOKEN / --rdzv_conf token=); empty = none. Every connection
  // proves it to the store (token_auth.hpp), whose policy keeps strangers off the rendezvous keys.
  std::string token;
  AgreedSettings must_agree;  // checked by the leader against every join (mismatch: all nodes end)
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;  // static rendezvous: this node's rank; -1: assigned on arrival (c10d)
  int local_world_size = 1;
  std::string node_name;  // shown in messages; defaults to the host name
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  // Static rendezvous, first round: a node other than node 0 gives up when node 0 (which hosts
  // the store) has not announced itself there within this long: the store it reached belongs
  // to another job (two jobs derived one port). Zero: no such check.
  std::chrono::milliseconds leader_timeout{0};
  // Elastic jobs (c10d, or static with spares): a join that finds its round formed without it
  // waits as a *pending* node until the running nodes invite it into a round (or refuse it),
  // instead of failing. It heartbeats every `pending_heartbeat` meanwhile so that they admit only
  // live nodes.
  bool may_wait_pending = false;
  std::chrono::milliseconds pending_heartbeat{std::chrono::milliseconds(500)};
  // Called on the joining thread when this node starts waiting as "pending" and when the running
  // nodes tell it that it is a "spare" (the job is full; it replaces the next lost node).
  std::function<void(const std::string& role)> on_waiting;
  // Called on the joining thread at most once per `join_progress_interval` while this node waits
  // for its round to form (first after one interval), with how long it has waited and the
  // round's status as the leader publishes it: who arrived, who is missing.
  std::function<void(std::chrono::milliseconds waited, const std::string& status)> on_join_progress;
  std::chrono::milliseconds join_progress_interval{std::chrono::seconds(3)};
  // Joins from these node names are refused (--exclude-hosts); checked by the round's leader.
  std::vector<std::string> excluded_hosts;
  // The job's budgets used before this round (--max_restarts, --max-rescales), published for the
  // round by every node that took part in the job before (-1: this node knows nothing), so that
  // a node that joins later counts from the job's figures, not from zero.
  int restarts_used = -1;
  int rescales_used = -1;
  // A re-form (a pinned round of the survivors of `previous_round`): survivor i, who joins as
  // node rank i, was node `survivors_previous_ranks[i]` there. Its monitor heartbeats in that
  // round until it starts to join this one, so the leader watches the heartbeat of each survivor
  // that has not joined yet: one that stands still for `survivor_heartbeat_timeout` is gone (lost
  // in the same event as the node that caused the re-form, reported a tick later), and the round
  // fails at once, naming it, instead of waiting out join_timeout. Empty: not a re-form.
  int previous_round = -1;
  std::vector<int> survivors_previous_ranks;
  std::chrono::milliseconds survivor_heartbeat_timeout{0};
  // A restart (the same job meeting again, unpinned, after a failure in `previous_round`): this
  // node's rank there and how many nodes that round had. Each join names its node's old rank
  // (JoinRequest::previous_node_rank), and the leader watches the old heartbeat of every member
  // that has not joined yet, as for a re-form; but a member that stands still only fails the
  // round when the nodes that can still meet (admitted ones and members still beating) are
  // fewer than min_nodes: otherwise the round forms without it at last call. Without this, the
  // one node left after the others were lost meanwhile waited out join_timeout. In both, the
  // leader beats under the round's `leader_beat` key while it leads; a node waiting for its
  // answer that sees neither that beat nor (a re-form's leader not joined yet) its old heartbeat
  // move for `survivor_heartbeat_timeout` ends the round as a loss too (a leader killed before it
  // answered left the others waiting out join_timeout). 0: not a restart.
  int previous_node_rank = -1;
  int previous_round_nodes = 0;
  // A job without its own run id (--rdzv_id not given): "NAME HASH", a fingerprint of the program
  // it runs (not of its arguments). The first node records it under the run id; a node whose
  // hash differs probably belongs to an unrelated job that shares the endpoint and would wait as
  // this job's spare until join_timeout, so `on_warning` gets one line at once naming --rdzv_id.
  // Only a warning: the record may be a finished job's on a store that outlived it, or the nodes'
  // copies of the script may differ. Empty: no check (an explicit id).
  std::string default_id_command;
  // Called on the joining thread with a one-line warning (no "warning: " prefix).
  std::function<void(const std::string& text)> on_warning;
};

struct RendezvousResult {
  int round = 0;  // the round joined: the one asked for, or the one a pending node was invited to
  int node_rank = 0;
  int num_nodes = 0;
  int world_size = 0;
  int base_rank = 0;  // RANK of this node's LOCAL_RANK 0
  int local_world_size = 0;
  Assignment assignment;   // every node, in node-rank order
  int restarts_used = -1;  // the job's budgets as published for this round (-1: none were)
  int rescales_used = -1;
  // Joined by invitation after waiting as pending: the job ran without this node meanwhile, so
  // the figures above (the running nodes') are the job's, not the ones this node had counted
  // (it published none for the round it was invited to).
  bool was_pending = false;
  // The workers' store of this round when the rendezvous chose it (--rdzv_backend etcd: node 0
  // hosts one per attempt); port 0: the job's store as configured.
  std::string master_addr{};
  int master_port = 0;
};

// Join failed: timed out (the message says who arrived and who did not) or was refused.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The round cannot form because nodes of the round before stopped heartbeating before they
// rejoined (a re-form's survivor, or too many of a restart's members): a node loss, not a failed
// join. Every node of the round gets this one (the leader publishes it).
class RoundMembersLostError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// `store` with the token handshake on every connection (unchanged when the token is empty).
StoreClientOptions with_token(StoreClientOptions store, const std::string& token);

// Blocks until the job's nodes have met or join_timeout passes. The leader (node rank 0 when
// static, the first arrival otherwise) admits joins and publishes the assignment; refused
// joins are logged by the leader and reported to the joiner.
RendezvousResult join_rendezvous(const StoreClientOptions& store,
                                 const NodeRendezvousOptions& options);

// A node's progress in the current round, as its agent publishes it on its heartbeat (key
// progress/<node_rank>): how many progress events its ranks made (monotonic within the round) and
// the highest step they reported. Counters, never wall-clock times, so the hosts' clocks need not
// agree: each node notes, by its own clock, when it saw another node's count change.
// `all_started`: every live rank of the node has shown progress in the round (the others' startup
// timeout lasts until every node says so: docs/health.md).
struct NodeProgress {
  std::int64_t events = 0;
  std::optional<std::int64_t> best_step;
  bool all_started = false;
  bool operator==(const NodeProgress&) const = default;
};
// "<events>" or "<events> <best_step>", then " starting" while some rank has not started (only
// when events > 0: "0" is not started anyway). A record without the marker is started once its
// events are above 0 (what a node older than the marker writes). decode gives nullopt for
// anything else. An older node cannot read a record with the marker and ignores it (it sees
// that node's progress once all of its ranks started).
inline constexpr std::string_view kNodeStartingMarker = " starting";
std::string encode_node_progress(const NodeProgress& progress);
std::optional<NodeProgress> decode_node_progress(std::string_view text);

// Another node's record for the job-wide view (launcher/health/job_view.hpp), as the monitor
// read it under .../view/<node_rank>: opaque here, at most kMaxViewBytes (a longer one reads as
// empty). `lost`: its heartbeat stopped (on_node_lost was called for it).
inline constexpr std::size_t kMaxViewBytes = 65536;
// The one line for another node's record over kMaxViewBytes at `key` (not ddprun's: an agent
// never publishes one): said once per node and round, on c10d and on etcd alike.
std::string oversized_view_line(int node_rank, const std::string& key);
struct NodeView {
  int node_rank = 0;
  std::string name;
  std::string record;
  bool lost = false;
};

// Heartbeats and job-wide stop after a successful join. Runs one background thread with its own
// store connection; callbacks run on that thread (each at most once per node / once for stop).
class NodeMonitor {
 public:
  struct Options {
    std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(1)};
    std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
  };
  struct Callbacks {
    std::function<void(const NodeAssignment& lost)> on_node_lost;
    std::function<void(const std::string& reason)> on_stop;
    // The store stopped answering for longer than heartbeat_timeout (its host is gone).
    std::function<void(const std::string& error)> on_store_lost;
    // The pending nodes (JoinRequest::seq = pending number) that are alive (their heartbeat
    // moved within heartbeat_timeout) and not yet invited or refused, in arrival order; called
    // whenever that list changes.
    std::function<void(const std::vector<JoinRequest>& pending)> on_pending;
    // Job-wide progress (both optional). local_progress is asked once per heartbeat and published
    // when it changed; on_progress_elsewhere is called when another node's published progress
    // changed, with the highest step any other node published (nullopt: none).
    std::function<NodeProgress()> local_progress;
    // `others_started`: every other node's record says all its ranks started.
    std::function<void(std::optional<std::int64_t> best_step_elsewhere, bool others_started)>
        on_progress_elsewhere;
    // The job-wide view (both optional). local_view is asked once per heartbeat and published
    // under view/<node_rank> when it changed (at most kMaxViewBytes); on_views is called with
    // every other node of the round whenever a record or a node's lost state changed (a node
    // whose key is missing, e.g. an older agent's, has an empty record).
    std::function<std::string()> local_view;
    std::function<void(const std::vector<NodeView>& others)> on_views;
  };

  NodeMonitor(const StoreClientOptions& store, const NodeRendezvousOptions& rendezvous,
              const RendezvousResult& joined, Options options, Callbacks callbacks);
  ~NodeMonitor();
  NodeMonitor(const NodeMonitor&) = delete;
  NodeMonitor& operator=(const NodeMonitor&) = delete;

  // Tell every node to stop (first reason wins); returns the reason now in force. Throws
  // StoreError if the store is unreachable.
  std::string broadcast_stop(const std::string& reason);

 private:
  void run();
  NodeRendezvousOptions round_;

  StoreClient client_;
  StoreClient control_;  // broadcast_stop from the caller's thread
  std::string prefix_;
  RendezvousResult joined_;
  Options options_;
  Callbacks callbacks_;
  std::mutex mutex_;
  std::condition_variable wake_;  // ends the pause between heartbeats when stopping
  bool stopping_ = false;
  std::thread thread_;
};

// The default-id check (NodeRendezvousOptions::default_id_command, not empty): records this
// node's fingerprint under the run id unless one is there; the warning line when the recorded
// program's content differs (same content under another file name: none).
std::optional<std::string> default_id_mismatch(StoreClient& client, const StoreClientOptions& store,
                                               const NodeRendezvousOptions& round);

// Pending nodes (see NodeRendezvousOptions::may_wait_pending). Keys under ddprun/<run_id>/pending/.
// Invites pending node `seq` into round `round`: exactly `nodes` nodes, it at `node_rank`.
void invite_pending(StoreClient& client, const std::string& run_id, std::int64_t seq, int round,
                    int nodes, int node_rank);
// Tells pending node `seq` that it will not be admitted (it ends with a RendezvousError).
void refuse_pending(StoreClient& client, const std::string& run_id, std::int64_t seq,
                    const std::string& reason);
// Tells pending node `seq` that it waits as a spare (the job is full).
void mark_spare(StoreClient& client, const std::string& run_id, std::int64_t seq);

// The end of a round, after a successful join. Every call blocks on store WAITs of at most
// `slice` and asks `keep_waiting()` between them (the caller's cancel flag); a store that stops
// answering surfaces as StoreError from the client's own timeouts.

// Tells every node of the round to stop; the first reason wins and is returned. Also ends every
// node's exit barrier.
std::string broadcast_stop(StoreClient& client, const NodeRendezvousOptions& round,
                           const std::string& reason);

struct ExitBarrierResult {
  enum class End {
    AllDone,    // every node of the round reached the barrier
    Stopped,    // a stop was broadcast first; `stop` holds its record
    Cancelled,  // keep_waiting() said no
  };
  End end = End::AllDone;
  std::string stop;
};
// This node's workers finished: wait until every node's did, or a stop arrives.
ExitBarrierResult exit_barrier(StoreClient& client, const NodeRendezvousOptions& round,
                               const RendezvousResult& joined, std::chrono::milliseconds slice,
                               const std::function<bool()>& keep_waiting);

// This node is leaving the round. With wait_for_others (the store's host) it then waits, at most
// `budget`, until every node has left, so nobody loses the store before reading the outcome.
void leave_round(StoreClient& client, const NodeRendezvousOptions& round,
                 const RendezvousResult& joined, bool wait_for_others,
                 std::chrono::milliseconds budget, std::chrono::milliseconds slice,
                 const std::function<bool()>& keep_waiting);

// The workers' keys: everything on the store outside ddprun's own key space. torch 1.13 workers put
// their init keys under /worker/attempt_<n>, but torch 2.x (2.15 included) key them by process
// group only ("default_pg/0/..."), so a restarted or re-formed attempt would read the previous
// attempt's gloo addresses ("connectFullMesh ... Connection refused"). torchrun 2.15 shares one
// store across rounds and has the same fault; ddprun deletes those keys between attempts instead.
inline constexpr std::string_view kAgentKeySpace = "ddprun/";
bool is_worker_key(std::string_view key);  // `key` without the client's leading "/"
// Deletes every worker key (the client must hold the token where there is one); returns how many.
std::size_t clear_worker_keys(StoreClient& client);

// Every node calls this after joining round > 0, before starting workers. Every node of the round
// reaped its previous workers before joining, so none of them can still write: node 0 clears
// their keys and marks the round; the others wait (at most `timeout`) for the mark, so that no
// worker of the new attempt starts while old keys are there. Throws RendezvousError on timeout.
void clear_previous_attempt(StoreClient& client, const NodeRendezvousOptions& round,
                            const RendezvousResult& joined, std::chrono::milliseconds timeout);

}  // namespace ddp::rdzv
