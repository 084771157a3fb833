#pragma once

// The pure half of the etcd rendezvous (--rdzv_backend etcd): the key layout under the job's
// prefix, the round record every join rewrites in one txn (compare its mod revision, then put),
// the decision each joiner takes on the record it read, and the token's seal on every value.
// No I/O: etcd_round_protocol.cpp drives it over the gateway (etcd_gateway.hpp).

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/etcd/etcd_codec.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddp::rdzv::etcd {

// The job id as one key segment: '%', '/' and bytes outside printable ASCII become %XX, so
// "team/exp1" is "team%2Fexp1" and never a prefix of another job's keys.
std::string encode_job_id(std::string_view run_id);

// Where a job's keys live: "<prefix>/<run_id>/r<round>/..." (prefix from --rdzv_conf
// etcd_prefix, default "/ddprun"; the id encoded by encode_job_id). A job re-run under the same
// id after its last generation ended is a new generation: generation g > 0 lives under
// "<prefix>/<run_id>/g<g>/", and "<prefix>/<run_id>/generation" holds the current one.
class JobKeys {
 public:
  JobKeys(std::string prefix, const std::string& run_id, std::int64_t generation = 0);
  std::string job() const { return root_; }         // every key of the generation starts with this
  std::string id_root() const { return id_root_; }  // every key of every generation
  std::string generation_key() const { return id_root_ + "generation"; }
  std::int64_t generation() const { return generation_; }
  std::string round(int round) const;   // every key of one round
  std::string record(int round) const;  // the round record (members, open/closed)
  std::string alive(int round, std::int64_t lease) const;  // a member's key on its lease
  std::string alive_prefix(int round) const;
  std::string store(int round) const;                // the workers' store: "host:port"
  std::string stop(int round) const;                 // the first stop reason
  std::string done(int round, int node_rank) const;  // the exit barrier
  std::string done_prefix(int round) const;
  // "left/<node_rank>", on the member's lease: put just before it revokes the lease on its way out,
  // so the others tell a node that left from one whose heartbeats stopped.
  std::string left(int round, int node_rank) const;
  std::string left_prefix(int round) const;
  // A member's progress (rdzv::NodeProgress, for the job-wide hang verdict), on its lease.
  std::string progress(int round, int node_rank) const;
  std::string progress_prefix(int round) const;
  // A member's record for the job-wide view (launcher/health/job_view.hpp), on its lease.
  std::string view(int round, int node_rank) const;
  std::string view_prefix(int round) const;
  // Nodes that arrived after their round closed (job-wide, not per round): the request
  // "pending/<lease hex>" on the node's own lease, and the running nodes' answer under it.
  std::string pending_prefix() const;
  std::string pending(std::int64_t lease) const;
  std::string pending_invite(std::int64_t lease) const;  // an Invitation or "refused: <why>"
  std::string pending_spare(std::int64_t lease) const;   // "1": the job is full, it waits

 private:
  std::string id_root_;
  std::string root_;
  std::int64_t generation_ = 0;
};

struct RoundMember {
  std::int64_t lease = 0;  // its etcd lease: the member's identity and liveness
  std::string name;
  int local_world_size = 1;
  int asked_rank = -1;   // static --node_rank, or the node rank a re-form gave it; -1: on arrival
  std::string settings;  // the settings that must agree, as one line
};

struct RoundRecord {
  bool open = true;
  int min_nodes = 1;
  int max_nodes = 1;
  std::vector<RoundMember> members;  // arrival order while open; node-rank order once closed
  // The job's budgets so far, carried to nodes that join later (-1: nobody published them).
  int restarts_used = -1;
  int rescales_used = -1;
};

std::string encode_round(const RoundRecord& record);
std::optional<RoundRecord> decode_round(std::string_view text);

// What a joiner asked for.
struct RoundShape {
  int min_nodes = 1;
  int max_nodes = 1;
  int restarts_used = -1;
  int rescales_used = -1;
};

struct JoinStep {
  enum class Kind {
    Write,    // put `next` (compare the record's mod revision, or absence)
    Joined,   // this member is in the record already (an earlier txn of ours won)
    Closed,   // the round formed without this node
    Refused,  // `reason`: it cannot join this round (rank taken, settings differ)
  };
  Kind kind = Kind::Write;
  RoundRecord next;
  std::string reason;
  std::vector<RoundMember> dropped;  // members of the open round whose leases ended
};
// The step of a joiner `me` that read `current` (nullopt: no record yet). A record that fills
// to max_nodes is closed by the same write.
JoinStep join_step(const std::optional<RoundRecord>& current, const RoundMember& me,
                   const RoundShape& shape);

// A round's live members: each lease with an alive key in the round, and that key's mod
// revision (what a txn compares to know the member is still there).
using AliveKeys = std::map<std::int64_t, std::int64_t>;
// The alive keys among `kvs` (a range read of JobKeys::alive_prefix(round)).
AliveKeys alive_keys(const std::vector<KeyValue>& kvs, std::string_view alive_prefix);
// The lease of an alive key ("<alive_prefix><lease hex>"); nullopt for any other key.
std::optional<std::int64_t> lease_of_alive_key(std::string_view key, std::string_view prefix);

// join_step on a record read with its alive keys: an open round's members whose alive key is gone
// (their lease ended: killed, Ctrl-C'd, or stopped for longer than the lease) are dropped before
// `me` is added, so a round never fills, and never closes, around a dead member. `me` listed
// without its alive key is added again (the caller renews its lease first when it ended). An
// open round with no live member left takes `me`'s shape (its nodes may differ from the dead
// attempt's). A closed round is never changed.
JoinStep join_step(const std::optional<RoundRecord>& current, const RoundMember& me,
                   const RoundShape& shape, const AliveKeys& alive);
// What the txn that writes `next` for round `round` compares besides the record itself: every
// listed member's alive key, at the mod revision read (`alive`), except `me`'s (written by the
// same txn). A member that died between the read and the txn fails it; the joiner reads again.
// A listed member without an alive key gets a compare no key meets (mod revision -1).
std::vector<Compare> liveness_compares(const JobKeys& keys, int round, const RoundRecord& next,
                                       const AliveKeys& alive, std::int64_t me);

// "1 of 2 node(s) arrived: host-a; missing node rank(s): 1": what a join waiting on `current`
// prints every few seconds (as Admission::describe on c10d).
std::string round_status(const std::optional<RoundRecord>& current, const RoundShape& shape);

// A generation of the job has ended when its round 0 closed and no member of any of its rounds
// is alive (every lease ended: the job finished, or all its nodes are gone). A node that starts
// then begins the next generation instead of waiting as a late node of a job that is over.
bool generation_ended(const std::optional<RoundRecord>& round0, bool any_member_alive);
std::string encode_generation(std::int64_t generation);
std::optional<std::int64_t> decode_generation(std::string_view text);

// The exit barrier of a closed round, given the node ranks that arrived (their done keys, or
// seen arriving by the watch) and the alive keys: whether everyone arrived, and who did not,
// split into those whose lease ended (they never will: the barrier's bound) and those alive
// (their workers still run, however long training takes there). Lists read
// "node 1 (host-b), node 2 (host-c)".
struct BarrierVerdict {
  bool all_arrived = false;
  std::string gone;
  int gone_count = 0;
  std::string waiting;
  std::string arrived_text;  // "none" when nobody
};
BarrierVerdict barrier_verdict(const RoundRecord& closed, const std::set<int>& arrived,
                               const AliveKeys& alive);

// Why a member's alive key went, from what the watch saw with it: the member marked that it left
// (its agent ended and revoked its lease), the key went with keys no lease holds (the record: a
// cleanup such as `etcdctl del --prefix`), or else its lease expired (no heartbeat).
enum class AliveGone { Expired, Left, Deleted };
AliveGone why_alive_gone(bool left_marked, bool deleted_with_round_keys);
// "lost node 1 (host-b): <cause>" for the watch's loss line.
std::string alive_gone_text(int node_rank, std::string_view name, AliveGone why,
                            double heartbeat_timeout_s);

// Paces a waiting join's progress lines: the first after one interval, then one per interval.
class ProgressPacer {
 public:
  using Clock = std::chrono::steady_clock;
  ProgressPacer(Clock::time_point start, Clock::duration interval)
      : start_(start), next_(start + interval), interval_(interval) {}
  // How long the join has waited when a line is due at `now`; nullopt: not yet.
  std::optional<Clock::duration> due(Clock::time_point now);

 private:
  Clock::time_point start_;
  Clock::time_point next_;
  Clock::duration interval_;
};

// Closes an open round with its live members (`alive`: their leases) when they are enough:
// max_nodes of them, or min_nodes once `last_call_over`. nullopt: not yet.
std::optional<RoundRecord> close_step(const RoundRecord& open, const std::set<std::int64_t>& alive,
                                      bool last_call_over);
// A restart's or re-form's round that cannot form: the members of the round left (`previous`,
// closed, so in node-rank order) that are not in `current` and whose leases are gone (not in
// `alive`: the leases with an alive key in that round) are lost; when the members of `current`
// and the live members of `previous` not in it yet are fewer than `min_nodes`, says who was lost
// and why the round cannot form. nullopt: it may still form (or nobody was lost).
std::optional<std::string> lost_before_forming(const RoundRecord& previous,
                                               const RoundRecord& current,
                                               const std::set<std::int64_t>& alive, int min_nodes);
// Puts the members of a closed round in node-rank order: asked ranks first in their order, then
// the others in arrival order.
void order_members(RoundRecord& record);

// The closed round as ranks (node rank = index; global ranks contiguous per node).
Assignment assignment_of(const RoundRecord& closed);
// This member's node rank in a closed round (nullopt: not a member).
std::optional<int> node_rank_of(const RoundRecord& closed, std::int64_t lease);

// What the running nodes tell a pending node (JobKeys::pending_invite): join round `round` with
// exactly `nodes` nodes at `node_rank` (a re-form), or as configured (`nodes` 0: a restart's
// round).
struct Invitation {
  int round = 0;
  int nodes = 0;
  int node_rank = -1;
};
std::string encode_invitation(const Invitation& invitation);
std::string encode_refusal(std::string_view reason);
// An invitation, or the refusal's reason; nullopt for a value that is neither.
struct PendingVerdict {
  std::optional<Invitation> invitation;
  std::string refused;  // set when the node is refused
};
std::optional<PendingVerdict> decode_pending_verdict(std::string_view text);

// The running nodes' view of the pending nodes, fed with every key under
// JobKeys::pending_prefix() (a range read, then the watch's events, in any overlap: applying an
// event twice changes nothing). A pending node is live while its request exists (it is on its
// lease) and nobody invited or refused it; the live ones come in arrival order (the request's
// create revision), each JoinRequest::seq being the node's lease. Values without the job's seal
// are ignored. At most kMaxPending requests are kept (the oldest go first).
class PendingBoard {
 public:
  static constexpr std::size_t kMaxPending = 64;
  PendingBoard(std::string token, std::string pending_prefix)
      : token_(std::move(token)), prefix_(std::move(pending_prefix)) {}
  void put(std::string_view key, std::string_view value, std::int64_t create_revision);
  void erase(std::string_view key);
  void clear();
  std::vector<JoinRequest> live() const;

 private:
  struct Entry {
    std::optional<JoinRequest> request;
    std::int64_t since = 0;  // create revision of the request
    bool answered = false;
  };
  std::string token_;
  std::string prefix_;
  std::map<std::int64_t, Entry> entries_;  // by lease
};

// The job's token on every value: "<hmac-sha256 hex of key and payload>|<payload>" (without a
// token: "-|<payload>"). Bound to the key, so a record cannot be replayed under another key.
std::string seal(std::string_view token, std::string_view key, std::string_view payload);
// The payload when the seal matches (constant-time); nullopt for a stranger's value.
std::optional<std::string> unseal(std::string_view token, std::string_view key,
                                  std::string_view value);

}  // namespace ddp::rdzv::etcd
