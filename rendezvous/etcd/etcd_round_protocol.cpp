#include "rendezvous/etcd/etcd_round_protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_failure.hpp"

namespace ddp::rdzv::etcd {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

std::string settings_line(const AgreedSettings& agreed) {
  std::string out;
  for (const auto& [flag, value] : agreed) out += fmt::format("{}={};", flag, value);
  return out;
}

// As c10d's join progress (NodeRendezvousOptions::join_progress_interval).
constexpr auto kJoinProgressInterval = std::chrono::seconds(3);

// The round's node 0 lost its lease after the round closed, before it announced the workers'
// store: a node loss of the formed round, not a failed rendezvous (join_formed decides).
class StoreHostLost : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

}  // namespace

// The keepalive's connections and what it published (one heartbeat to the next).
struct EtcdRoundProtocol::Keepalive {
  std::unique_ptr<EtcdGateway> client;
  // The cross-check's calls get half a heartbeat each: a slow range (a loaded etcd) must not hold
  // the next keepalive back.
  std::unique_ptr<EtcdGateway> check;
  LeaseFence fence;
  std::optional<std::tuple<int, int, NodeProgress>> published;
  std::optional<std::tuple<int, int, std::string>> published_view;
  bool ended = false;  // the keepalive ended (beat() said false)
};

EtcdRoundProtocol::EtcdRoundProtocol(EtcdCluster& cluster, Options options, Callbacks callbacks)
    : cluster_(cluster),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      keys_(options_.prefix, options_.run_id),
      call_timeout_(std::min(options_.read_timeout, options_.heartbeat_timeout)),
      pending_(options_.token, keys_.pending_prefix()) {}

EtcdRoundProtocol::~EtcdRoundProtocol() {
  cancel_ = true;
  stop_keepalive();
  watch_.reset();
  // An agent that ends without leave() (a lost node or etcd: 74) gives its lease up too, so the
  // others read "left" at once rather than a missed heartbeat later. Not after a Ctrl-C that
  // abandoned a blocked join: the others re-form without it.
  if (!abandoned_) leave_etcd();
}

void EtcdRoundProtocol::stop_keepalive() {
  {
    std::lock_guard lock(keepalive_mutex_);
    keepalive_stop_ = true;
  }
  keepalive_wake_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
}

void EtcdRoundProtocol::leave_etcd() {
  const std::int64_t lease = lease_.load();
  if (lease == 0 || revoked_.exchange(true)) return;
  try {
    // Best effort and bounded: it expires by itself within heartbeat_timeout.
    auto client = cluster_.connect(milliseconds(1000));
    if (joined_ && joined_->round == publish_round_.load()) {
      const std::string key = keys_.left(joined_->round, joined_->node_rank);
      client->put(key, seal(options_.token, key, "1"), lease);
    }
    client->revoke_lease(lease);
  } catch (const std::exception&) {
  }
}

void EtcdRoundProtocol::abandon() {
  cancel_ = true;
  abandoned_ = true;
  // Interrupted while it waits for its first round (Ctrl-C): the lease goes now, and with it
  // this node's place in the open round, so a restart of the same job does not meet its ghost
  // (best effort, bounded). A node that was in a formed round keeps it until it expires: the
  // others are re-forming without it, and an early delete would reach them as a second loss.
  if (const std::int64_t lease = lease_.load(); lease != 0 && !ever_formed_) {
    try {
      cluster_.connect(milliseconds(1000))->revoke_lease(lease);
    } catch (const std::exception&) {
      // It expires by itself within heartbeat_timeout.
    }
  }
}

void EtcdRoundProtocol::report_etcd_lost(const std::string& why) {
  // In the exit barrier this node's workers have succeeded: etcd going away there decides
  // nothing (the barrier itself ends with the local result when etcd does not answer).
  if (in_barrier_) return;
  if (etcd_lost_.exchange(true)) return;
  // The client's errors already name the members ("etcd at A,B,C did not answer ...").
  const std::string text = why.find("etcd at ") != std::string::npos
                               ? fmt::format("lost etcd: {}", why)
                               : fmt::format("lost etcd at {}: {}", options_.endpoints, why);
  if (callbacks_.on_lost) callbacks_.on_lost(text, std::nullopt);
}

void EtcdRoundProtocol::note(const std::string& line) {
  if (callbacks_.on_note) callbacks_.on_note(line);
}

bool EtcdRoundProtocol::lease_gone() {
  if (lease_ == 0) return false;
  try {
    return client_->keep_alive(lease_) == 0;
  } catch (const EtcdRefused& e) {
    if (e.grpc_code() == kGrpcNotFound) return true;  // "requested lease not found"
    throw;
  }
}

std::string EtcdRoundProtocol::dropped_line(int round) const {
  // As c10d's node that the others re-formed without ("this node was dropped from the job",
  // docs/launcher.md): a node loss, 74, one line.
  return fmt::format(
      "this node was dropped from the job: its etcd lease {:x} ended after round {} of job '{}' "
      "formed with it (the node was stopped or cut off for longer than the lease's TTL of {} s): "
      "the other nodes took it for lost{}",
      lease_.load(), round, options_.run_id, lease_ttl_.count(),
      fixed_size() ? fmt::format(", and a job of a fixed {} node(s) has no place for it; start it "
                                 "again for a new run of the job",
                                 options_.max_nodes)
                   : std::string("; start it again to join the job as a new node"));
}

void EtcdRoundProtocol::report_dropped(int round) {
  // As etcd's loss: once, and not in the exit barrier (its workers succeeded; the barrier decides).
  if (in_barrier_) return;
  if (etcd_lost_.exchange(true)) return;
  const std::string line = dropped_line(round);
  if (callbacks_.on_dropped)
    callbacks_.on_dropped(line);
  else if (callbacks_.on_lost)
    callbacks_.on_lost(line, std::nullopt);
}

void EtcdRoundProtocol::renew_lease() {
  if (cancel_) throw std::runtime_error("the join was cancelled");
  const std::int64_t old = lease_;
  {
    std::lock_guard lock(keepalive_mutex_);
    keepalive_stop_ = true;
  }
  keepalive_wake_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  {
    std::lock_guard lock(keepalive_mutex_);
    keepalive_stop_ = false;
  }
  lease_ended_ = false;
  lease_ = 0;
  start_lease();
  note(fmt::format(
      "this node's etcd lease {:x} ended while it waited for the job's nodes (it was stopped or "
      "cut off for longer than heartbeat_timeout, {:.3g} s): it joins again with a new lease {:x}",
      old, options_.heartbeat_timeout.count() / 1000.0, lease_.load()));
}

void EtcdRoundProtocol::choose_generation() {
  const std::string key = keys_.generation_key();
  for (int tries = 0; tries < 10; ++tries) {
    if (cancel_) throw std::runtime_error("the join was cancelled");
    const auto read = client_->range(key);
    std::int64_t generation = 0;
    std::int64_t mod = 0;
    if (!read.kvs.empty()) {
      mod = read.kvs[0].mod_revision;
      // A stranger's value is no generation: it is written over when the job begins anew.
      if (auto payload = unseal(options_.token, key, read.kvs[0].value))
        generation = decode_generation(*payload).value_or(0);
    }
    keys_ = JobKeys(options_.prefix, options_.run_id, generation);
    if (!generation_ended(read_round(0), job_has_live_member(0))) break;
    // The first starter begins the next generation; the others read it on their next pass.
    const Compare same = mod == 0 ? Compare{key, Compare::Target::Create, 0, {}}
                                  : Compare{key, Compare::Target::Mod, mod, {}};
    const std::string next = encode_generation(generation + 1);
    if (client_->txn({same}, {put_op(key, seal(options_.token, key, next))}).succeeded) {
      note(fmt::format(
          "job '{}' on etcd ended before (generation {}: every node of it is gone); this run is "
          "generation {} under {}g{}/ (the old keys stay until `etcdctl del --prefix {}`)",
          options_.run_id, generation, generation + 1, keys_.id_root(), generation + 1,
          keys_.id_root()));
      keys_ = JobKeys(options_.prefix, options_.run_id, generation + 1);
      break;
    }
  }
  std::lock_guard lock(watch_mutex_);
  pending_ = PendingBoard(options_.token, keys_.pending_prefix());
}

void EtcdRoundProtocol::start_lease() {
  if (lease_ != 0) return;
  // The lease is this node's heartbeat: etcd deletes its keys once its TTL passes without a
  // keepalive. etcd may grant more than asked (at least its election timeout's worth, and its
  // floor of about 2 s): the TTL it granted is the one every bound below uses.
  const auto asked = std::max<std::int64_t>(
      2, static_cast<std::int64_t>(std::ceil(options_.heartbeat_timeout.count() / 1000.0)));
  const LeaseGrant grant = client_->grant_lease(asked);
  lease_ = grant.id;
  lease_ttl_ = std::chrono::seconds(grant.ttl > 0 ? grant.ttl : asked);
  // Said once: a renewed lease (a zombie joining again) gets the same TTL.
  if (grant.ttl > 0 && grant.ttl != asked && !ttl_warned_.exchange(true)) {
    note(fmt::format(
        "etcd granted this node's lease a TTL of {} s, not the {} s asked (heartbeat_timeout): a "
        "lost node is noticed after {} s",
        grant.ttl, asked, grant.ttl));
  }
  beat_ = std::make_unique<Keepalive>(
      Keepalive{cluster_.connect(std::max(options_.heartbeat_interval, milliseconds(500))),
                cluster_.connect(std::max(options_.heartbeat_interval / 2, milliseconds(250))),
                LeaseFence(lease_ttl_, now()),
                {},
                {},
                false});
  if (!options_.heartbeat_thread) return;
  keepalive_ = std::thread([this] {
    std::unique_lock lock(keepalive_mutex_);
    while (!keepalive_stop_) {
      lock.unlock();
      // The next keepalive is due a heartbeat after this one, however long the rest takes.
      const auto start = Clock::now();
      if (!beat()) return;
      lock.lock();
      keepalive_wake_.wait_until(lock, start + options_.heartbeat_interval,
                                 [this] { return keepalive_stop_; });
    }
  });
}

bool EtcdRoundProtocol::beat() {
  if (!beat_ || beat_->ended) return false;
  EtcdGateway& client = *beat_->client;
  const auto started = now();
  LeaseFence::Outcome outcome = LeaseFence::Outcome::NoAnswer;
  std::string detail;
  try {
    outcome =
        client.keep_alive(lease_) > 0 ? LeaseFence::Outcome::Renewed : LeaseFence::Outcome::Gone;
  } catch (const EtcdRefused& e) {
    outcome = e.grpc_code() == kGrpcNotFound ? LeaseFence::Outcome::Gone
                                             : LeaseFence::Outcome::NotRenewed;
    detail = e.what();
  } catch (const EtcdUnavailable& e) {
    detail = e.what();
    outcome = e.etcd_answered() || client.any_member_answers() ? LeaseFence::Outcome::NotRenewed
                                                               : LeaseFence::Outcome::NoAnswer;
  } catch (const std::exception& e) {
    detail = e.what();
  }
  // Fences as etcd's lease semantics say (etcd_lease_fence.hpp): when etcd says the lease is
  // gone, or no member answered for the TTL; time without a leader does not count.
  if (const int round = publish_round_.load(); round >= 0 && outcome == LeaseFence::Outcome::Gone) {
    // etcd dropped this node's lease after its round formed (stopped past the TTL): the others
    // took it for lost. The same line and end as a join that meets it (dropped_line).
    report_dropped(round);
    beat_->ended = true;
    return false;
  } else if (publish_round_.load() < 0 && outcome != LeaseFence::Outcome::Renewed) {
    // Not in a formed round yet (joining, pending): nobody counts on this node. An ended lease
    // is renewed by the join, not a loss; etcd gone is found (and reported) by the join's own
    // calls, and the fence starts afresh so joining never counts against it.
    if (outcome == LeaseFence::Outcome::Gone) {
      lease_ended_ = true;
      beat_->ended = true;
      return false;
    }
    beat_->fence = LeaseFence(lease_ttl_, now());
  } else if (auto why = beat_->fence.note(outcome, now(), detail)) {
    report_etcd_lost(*why);
    beat_->ended = true;
    return false;
  }
  if (outcome != LeaseFence::Outcome::Renewed) return true;
  try {
    // With the heartbeat, as on c10d: this node's progress, for the others' hang verdict.
    const int round = publish_round_.load();
    const int rank = publish_rank_.load();
    if (round >= 0 && rank >= 0) {
      NodeProgress mine{progress_events_.load(), std::nullopt, all_started_.load()};
      if (has_best_step_.load()) mine.best_step = best_step_.load();
      const auto current = std::tuple{round, rank, mine};
      if (beat_->published != current) {
        const std::string key = keys_.progress(round, rank);
        client.put(key, seal(options_.token, key, encode_node_progress(mine)), lease_);
        beat_->published = current;
      }
      std::string view;
      {
        std::lock_guard view_lock(view_mutex_);
        view = view_record_;
      }
      if (!view.empty() && view.size() <= kMaxViewBytes &&
          beat_->published_view != std::tuple{round, rank, view}) {
        const std::string key = keys_.view(round, rank);
        client.put(key, seal(options_.token, key, view), lease_);
        beat_->published_view = std::tuple{round, rank, std::move(view)};
      }
    }
    // The watch's cross-check, once per heartbeat: a member whose alive key is gone is lost even
    // when the watch's member went silent without closing the stream.
    if (now() - started < options_.heartbeat_interval / 2) (void)reread_round(*beat_->check);
  } catch (const std::exception&) {
    // The next heartbeat tries again; the fence above decides about etcd.
  }
  return true;
}

std::int64_t EtcdRoundProtocol::reread_round(EtcdGateway& client) {
  std::optional<std::pair<int, RoundRecord>> watched;
  {
    std::lock_guard lock(watch_mutex_);
    watched = watched_;
  }
  if (!watched) return 0;
  const auto& [round, closed] = *watched;
  // Only the keys that decide (not the whole round: a stranger's huge values beside them would
  // be read every heartbeat): the stop key, the done keys, then the alive keys. Of the done and
  // alive keys only the names are read (keys_only: a stranger's 7 x 1.4 MB values inside
  // done/ or alive/ read every heartbeat slowed etcd until healthy leases expired); a done key's
  // value (its seal) is read only for a member's rank not yet seen done at that revision.
  const std::string alive_prefix = keys_.alive_prefix(round);
  const std::string done_prefix = keys_.done_prefix(round);
  const auto read = client.range(keys_.stop(round));
  WatchMessage current;
  for (const auto& kv : read.kvs) current.events.push_back(WatchEvent{WatchEvent::Type::Put, kv});
  for (const auto& kv : client.range(done_prefix, prefix_end(done_prefix), true).kvs) {
    int rank = -1;
    const char* end = kv.key.data() + kv.key.size();
    auto [at, ec] = std::from_chars(kv.key.data() + done_prefix.size(), end, rank);
    if (ec != std::errc{} || at != end || rank < 0 ||
        rank >= static_cast<int>(closed.members.size()))
      continue;  // not a member's done key: the watch's check ignores it too
    {
      std::lock_guard lock(watch_mutex_);
      auto known = done_ranks_.find(rank);
      if (known != done_ranks_.end() && known->second == kv.mod_revision) continue;
    }
    for (const auto& full : client.range(kv.key).kvs)
      current.events.push_back(WatchEvent{WatchEvent::Type::Put, full});
  }
  std::set<std::int64_t> alive;
  for (const auto& kv : client.range(alive_prefix, prefix_end(alive_prefix), true).kvs) {
    if (auto lease = lease_of_alive_key(kv.key, alive_prefix)) alive.insert(*lease);
  }
  // After the puts: a member that finished (its done key) and left is no loss.
  for (const auto& member : closed.members) {
    if (alive.count(member.lease)) continue;
    WatchEvent gone{WatchEvent::Type::Delete, {}};
    gone.kv.key = keys_.alive(round, member.lease);
    current.events.push_back(std::move(gone));
  }
  {
    // The round may have ended while this read ran (a re-form): its keys are no news then.
    std::lock_guard lock(watch_mutex_);
    if (!watched_ || watched_->first != round) return read.revision;
  }
  on_watch(round, closed, current);
  return read.revision;
}

void EtcdRoundProtocol::end_round() {
  publish_round_ = -1;
  watch_.reset();
  joined_.reset();
  std::lock_guard lock(watch_mutex_);
  watched_.reset();
  done_ranks_.clear();
  lost_ranks_.clear();
  left_ranks_.clear();
  progress_seen_.clear();
  views_seen_.clear();
  oversized_views_.clear();
  stop_seen_ = false;
}

void EtcdRoundProtocol::note_progress(long long events, std::optional<long long> best_step,
                                      bool all_started) {
  all_started_.store(all_started);
  progress_events_.store(events);
  if (best_step) best_step_.store(*best_step);
  has_best_step_.store(best_step.has_value());
}

std::optional<RoundRecord> EtcdRoundProtocol::form_round(int round, const Ask& plan) {
  const auto deadline =
      now() + (plan.join_timeout.count() > 0 ? plan.join_timeout : options_.join_timeout);
  RoundMember me{lease_, options_.node_name, options_.local_world_size,
                 plan.nodes > 0 ? plan.node_rank : options_.node_rank,
                 settings_line(options_.must_agree)};
  const RoundShape shape{plan.nodes > 0 ? plan.nodes : options_.min_nodes,
                         plan.nodes > 0 ? plan.nodes : options_.max_nodes, plan.restarts_used,
                         plan.rescales_used};
  const std::string key = keys_.record(round);
  const std::string alive_prefix = keys_.alive_prefix(round);
  std::optional<Clock::time_point> enough_since;  // when the open round first had min_nodes
  std::optional<RoundRecord> previous;  // a restart: the round left (are enough of it alive?)
  auto too_few_since = Clock::time_point::max();  // max: enough of them are left
  ProgressPacer progress(now(), kJoinProgressInterval);
  bool wrote_alive = false;  // this node's alive key was written (so its absence means something)
  while (true) {
    if (cancel_) throw std::runtime_error("the join was cancelled");
    auto read = client_->range(key);
    const AliveKeys alive =
        alive_keys(client_->range(alive_prefix, prefix_end(alive_prefix)).kvs, alive_prefix);
    const std::int64_t mod = read.kvs.empty() ? 0 : read.kvs[0].mod_revision;
    // A value without the job's seal is a stranger's: the round is written over it.
    const auto payload =
        read.kvs.empty() ? std::nullopt : unseal(options_.token, key, read.kvs[0].value);
    const std::optional<RoundRecord> current = payload ? decode_round(*payload) : std::nullopt;
    // The lease ended while it waited (stopped past its TTL): a new lease, the old one dropped.
    if (lease_ended_ || (wrote_alive && !alive.count(lease_) && lease_gone())) {
      renew_unless_formed(round, current);
      me.lease = lease_;
      wrote_alive = false;
      continue;
    }
    const auto check_deadline = [&] {
      if (now() >= deadline) throw not_formed_in_time(round, current, shape);
    };
    const Compare same = mod == 0 ? Compare{key, Compare::Target::Create, 0, {}}
                                  : Compare{key, Compare::Target::Mod, mod, {}};
    // Every pass asks again whether this node is in the record: a record a stranger wrote over
    // (or one rewritten without it) is joined again, not waited on. Members whose leases ended
    // are dropped by the same write.
    JoinStep step = join_step(current, me, shape, alive);
    switch (step.kind) {
      case JoinStep::Kind::Refused:
        throw rdzv::RendezvousError(fmt::format("refused by round {} of job '{}' on etcd: {}",
                                                round, options_.run_id, step.reason));
      case JoinStep::Kind::Closed:
        return std::nullopt;
      case JoinStep::Kind::Joined:
        break;
      case JoinStep::Kind::Write:
        check_deadline();  // bounds a write war with a stranger as well as the wait
        wrote_alive = write_join(round, same, step.next, alive) || wrote_alive;
        continue;  // reread: closed by this write, or raced
    }
    if (!current->open) {  // listed in the closed round: formed with it, unless its lease ended
      if (!alive.count(lease_) && lease_gone()) return renew_unless_formed(round, current);
      return *current;
    }
    wrote_alive = true;
    if (auto waited = progress.due(now()); waited && callbacks_.on_join_progress)
      callbacks_.on_join_progress(duration_cast<milliseconds>(*waited),
                                  round_status(current, shape));
    if (static_cast<int>(current->members.size()) >= current->min_nodes && !enough_since)
      enough_since = now();
    const bool last_call_over = enough_since && now() - *enough_since >= options_.last_call_timeout;
    if (close_if_due(round, same, *current, alive, last_call_over)) continue;
    if (plan.previous_round >= 0 && plan.previous_round_nodes > 0)  // a restart only
      check_restart_losses(round, plan, *current, previous, too_few_since);
    check_deadline();
    // Until something changes in the round, the deadline, the end of the last call, or 1 s.
    const auto until = enough_since && !last_call_over
                           ? std::min(deadline, *enough_since + options_.last_call_timeout)
                           : deadline;
    const auto wait = std::min<Clock::duration>(until - now(), std::chrono::seconds(1));
    (void)client_->wait_for_change(
        keys_.round(round), prefix_end(keys_.round(round)), read.revision + 1,
        std::max(std::chrono::duration_cast<milliseconds>(wait), milliseconds(10)));
  }
}

RendezvousError EtcdRoundProtocol::not_formed_in_time(int round,
                                                      const std::optional<RoundRecord>& current,
                                                      const RoundShape& shape) const {
  return RendezvousError(fmt::format(
      "round {} of job '{}' on etcd did not form in time: {} of {}:{} node(s) arrived", round,
      options_.run_id, current ? current->members.size() : 0, shape.min_nodes, shape.max_nodes));
}

std::optional<RoundRecord> EtcdRoundProtocol::renew_unless_formed(
    int round, const std::optional<RoundRecord>& current) {
  // The round closed with this node before its lease ended: it formed, and the others took this
  // node for lost. A fixed-size job ends without it (or lost it): one line, at once. An elastic
  // one re-forms without it and may admit it again as a late node, on a new lease.
  if (current && !current->open && node_rank_of(*current, lease_) && fixed_size())
    throw lost_while_stopped(round);
  renew_lease();
  return std::nullopt;
}

bool EtcdRoundProtocol::write_join(int round, const Compare& same, const RoundRecord& next,
                                   const AliveKeys& alive) {
  const std::string key = keys_.record(round);
  // The txn holds only while every other listed member is still alive: a round never fills, or
  // closes, around a member whose lease ended.
  std::vector<Compare> compares = liveness_compares(keys_, round, next, alive, lease_);
  compares.insert(compares.begin(), same);
  try {
    return client_
        ->txn(compares, {put_op(key, seal(options_.token, key, encode_round(next))),
                         put_op(keys_.alive(round, lease_), "1", lease_)})
        .succeeded;
  } catch (const EtcdUnavailable&) {
    throw;
  } catch (const std::exception&) {
    // etcd refuses a put on a lease it no longer has: this node was stopped past its TTL between
    // the read and this write. Anything else is an error of its own.
    if (!lease_gone()) throw;
    lease_ended_ = true;
    return false;
  }
}

bool EtcdRoundProtocol::close_if_due(int round, const Compare& same, const RoundRecord& current,
                                     const AliveKeys& alive, bool last_call_over) {
  // Any member may close: only live members count (their alive keys are on their leases), and
  // the close holds only while they still are.
  std::set<std::int64_t> live;
  for (const auto& [lease, since] : alive) live.insert(lease);
  auto closed = close_step(current, live, last_call_over);
  if (!closed) return false;
  const std::string key = keys_.record(round);
  std::vector<Compare> compares = liveness_compares(keys_, round, *closed, alive, 0);
  compares.insert(compares.begin(), same);
  (void)client_->txn(compares, {put_op(key, seal(options_.token, key, encode_round(*closed)))});
  return true;
}

void EtcdRoundProtocol::check_restart_losses(int round, const Ask& plan, const RoundRecord& current,
                                             std::optional<RoundRecord>& previous,
                                             Clock::time_point& too_few_since) {
  // A restart only: a re-form's pinned round counts a spare not joined yet as missing, and is
  // bounded by its own short join timeout anyway.
  if (!previous) previous = read_round(plan.previous_round);
  auto lost = previous ? lost_in_round(*previous, plan.previous_round, current) : std::nullopt;
  if (!lost) {
    too_few_since = Clock::time_point::max();
    return;
  }
  // Held for a lease's lifetime: a node invited into this round may be on its way.
  const auto at = now();
  if (too_few_since == Clock::time_point::max()) too_few_since = at;
  if (at - too_few_since >= options_.heartbeat_timeout) {
    throw rdzv::RoundMembersLostError(
        fmt::format("round {} of job '{}' on etcd: {}", round, options_.run_id, *lost));
  }
}

std::optional<RoundRecord> EtcdRoundProtocol::read_round(int round) {
  const std::string key = keys_.record(round);
  auto read = client_->range(key);
  if (read.kvs.empty()) return std::nullopt;
  auto payload = unseal(options_.token, key, read.kvs[0].value);
  if (!payload) return std::nullopt;
  auto record = decode_round(*payload);
  if (!record || record->open) return std::nullopt;
  return record;
}

std::optional<std::string> EtcdRoundProtocol::lost_in_round(const RoundRecord& previous,
                                                            int previous_round,
                                                            const RoundRecord& current) {
  const std::string alive_prefix = keys_.alive_prefix(previous_round);
  std::set<std::int64_t> alive;
  for (const auto& kv : client_->range(alive_prefix, prefix_end(alive_prefix)).kvs) {
    if (auto lease = lease_of_alive_key(kv.key, alive_prefix)) alive.insert(*lease);
  }
  return lost_before_forming(previous, current, alive, current.min_nodes);
}

void EtcdRoundProtocol::announce_or_find_store(int round, rdzv::RendezvousResult& joined) {
  const std::string key = keys_.store(round);
  if (joined.node_rank == 0) {
    if (!callbacks_.host_store) throw RendezvousError("this node cannot host the workers' store");
    std::tie(joined.master_addr, joined.master_port) = callbacks_.host_store();
    client_->put(key, seal(options_.token, key,
                           fmt::format("{}:{}", joined.master_addr, joined.master_port)));
    return;
  }
  const auto deadline = now() + options_.join_timeout;
  while (!cancel_) {
    auto read = client_->range(key);
    if (!read.kvs.empty()) {
      if (auto payload = unseal(options_.token, key, read.kvs[0].value)) {
        const auto colon = payload->rfind(':');
        int port = 0;
        if (colon != std::string::npos) {
          std::from_chars(payload->data() + colon + 1, payload->data() + payload->size(), port);
        }
        if (port > 0) {
          joined.master_addr = payload->substr(0, colon);
          joined.master_port = port;
          return;
        }
      }
    }
    if (now() >= deadline) break;
    // Node 0 announces right after the round closed; if it died meanwhile its lease goes and
    // the next round re-forms without it (this wait is bounded by the join timeout).
    (void)client_->wait_for_change(key, "", read.revision + 1, options_.heartbeat_timeout);
    const std::string alive = keys_.alive(round, joined.assignment.nodes.at(0).seq);
    if (client_->range(alive).kvs.empty()) {
      throw StoreHostLost(
          fmt::format("node 0 of round {} ({}) was lost before it announced the workers' store",
                      round, joined.assignment.nodes.at(0).name));
    }
  }
  throw rdzv::RendezvousError(
      fmt::format("node 0 of round {} never announced the workers' store", round));
}

RendezvousResult EtcdRoundProtocol::join(int round, const Ask& plan) {
  const int was_in = joined_ ? joined_->round : -1;
  end_round();
  cancel_ = false;
  const auto join_timeout =
      plan.join_timeout.count() > 0 ? plan.join_timeout : options_.join_timeout;
  const auto deadline = now() + join_timeout;
  if (!client_) {
    client_ = std::make_unique<PatientGateway>(
        cluster_.connect(call_timeout_),
        PatientGateway::Hooks{
            [this] { return now(); }, options_.sleep, [this] { return cancel_.load(); },
            [this, join_timeout](const std::string& why) {
              note(fmt::format(
                  "etcd answers but cannot serve the join now ({}): an election? "
                  "the join tries again for up to join_timeout ({} s)",
                  why, std::chrono::duration_cast<std::chrono::seconds>(join_timeout).count()));
            }});
    // Members of two clusters would each hold a job of their own, and a failover would move this
    // node from one to the other: said once, at the first join (69), not found mid-job (every
    // later reply's cluster id is compared with the one settled here).
    client_->check_one_cluster(join_timeout);
  }
  // The join's calls wait out an election (a leader killed while the agents join) until its
  // deadline; outside a join every error goes to its caller at once.
  client_->patient_until(deadline);
  struct Impatient {
    PatientGateway& client;
    ~Impatient() { client.patient_until(std::nullopt); }
  } impatient{*client_};
  // This node was in a formed round and its lease expired meanwhile (stopped past its TTL): the
  // others took it for lost. A fixed-size job has no place for it: said now, not after waiting as
  // a pending node until join_timeout.
  if (was_in >= 0 && fixed_size() && lease_gone()) throw lost_while_stopped(was_in);
  if (!generation_chosen_) {
    choose_generation();
    generation_chosen_ = true;
  }
  start_lease();
  std::optional<RoundRecord> formed = form_round(round, plan);
  if (!formed) {
    // As on c10d: an elastic job (or one that takes spares) admits a late node into a later
    // round; a job of fixed nodes does not.
    if (!(options_.dynamic || options_.spares) || plan.nodes > 0) {
      throw rdzv::RendezvousError(fmt::format(
          "round {} of job '{}' on etcd formed without this node", round, options_.run_id));
    }
    const std::optional<Invitation> pending = wait_as_pending(round, deadline);
    if (!pending) {
      // Nobody of the job is left (all its agents were killed just before this re-run): begin
      // the next generation, as after a clean finish, instead of waiting on a dead one.
      try {
        client_->erase(keys_.pending(lease_), prefix_end(keys_.pending(lease_)));
      } catch (const std::exception&) {
        // on this node's lease: it goes with the lease anyway
      }
      choose_generation();
      Ask fresh = plan;
      fresh.join_timeout = std::max(std::chrono::duration_cast<milliseconds>(deadline - now()),
                                    options_.last_call_timeout);
      return join_formed(0, form_round(0, fresh));
    }
    const Invitation invited = *pending;
    Ask next = plan;
    if (invited.nodes > 0) {  // a re-form: exactly these nodes, this one at node_rank
      next.nodes = invited.nodes;
      next.node_rank = invited.node_rank;
    }  // else a restart's round, met as configured
    next.join_timeout = std::max(std::chrono::duration_cast<milliseconds>(deadline - now()),
                                 options_.last_call_timeout);
    round = invited.round;
    formed = form_round(round, next);
    if (!formed) {
      throw rdzv::RendezvousError(
          fmt::format("round {} of job '{}' on etcd formed without this node, which it had invited",
                      round, options_.run_id));
    }
  }
  return join_formed(round, formed);
}

rdzv::RendezvousResult EtcdRoundProtocol::join_formed(int round,
                                                      const std::optional<RoundRecord>& formed) {
  if (!formed) {
    throw rdzv::RendezvousError(fmt::format("round {} of job '{}' on etcd formed without this node",
                                            round, options_.run_id));
  }
  const RoundRecord& closed = *formed;
  auto rank = node_rank_of(closed, lease_);
  if (!rank) {
    throw rdzv::RendezvousError(fmt::format("round {} of job '{}' on etcd formed without this node",
                                            round, options_.run_id));
  }
  rdzv::RendezvousResult joined;
  joined.round = round;
  joined.node_rank = *rank;
  joined.assignment = assignment_of(closed);
  joined.num_nodes = static_cast<int>(closed.members.size());
  joined.world_size = joined.assignment.world_size;
  joined.base_rank = joined.assignment.nodes[*rank].base_rank;
  joined.local_world_size = options_.local_world_size;
  joined.restarts_used = closed.restarts_used;
  joined.rescales_used = closed.rescales_used;
  // Watch from the round's start: every stop, loss and arrival at the barrier since.
  const std::int64_t from = client_->range(keys_.record(round)).kvs.at(0).create_revision;
  seed_pending_board();
  start_watch(round, from, closed);
  try {
    announce_or_find_store(round, joined);
  } catch (const StoreHostLost& lost) {
    return reform_without_store_host(round, closed, *rank, lost.what());
  }
  joined_ = joined;
  closed_round_ = closed;
  ever_formed_ = true;
  publish_rank_ = joined.node_rank;
  publish_round_ = round;
  return joined;
}

RendezvousResult EtcdRoundProtocol::reform_without_store_host(int round, const RoundRecord& closed,
                                                              int my_rank, const std::string& why) {
  end_round();  // the watch of the round that lost its node 0
  const int survivors = static_cast<int>(closed.members.size()) - 1;
  // As any node lost in a formed round (docs/rendezvous.md, "What survives what"): an elastic job
  // whose other nodes still make min_nodes re-forms without it; otherwise the job lost a node.
  if (!options_.dynamic || survivors < options_.min_nodes) {
    throw RoundMembersLostError(
        fmt::format("round {} of job '{}' on etcd: {}", round, options_.run_id, why));
  }
  note(
      fmt::format("round {} of job '{}' on etcd: {}; the {} other node(s) re-form round {} "
                  "without it",
                  round, options_.run_id, why, survivors, round + 1));
  // Every survivor drops node 0 alone and keeps the others' order: they all ask for one round.
  Ask next;
  next.nodes = survivors;
  next.node_rank = my_rank - 1;
  // No worker ran yet: the survivors are all on their way; one lost meanwhile must not hold the
  // others for the configured join timeout.
  next.join_timeout = std::min<milliseconds>(options_.join_timeout,
                                             2 * options_.heartbeat_timeout + milliseconds(5000));
  next.restarts_used = std::max(closed.restarts_used, 0);
  next.rescales_used = std::max(closed.rescales_used, 0) + 1;  // a membership change
  return join_formed(round + 1, form_round(round + 1, next));
}

std::optional<Invitation> EtcdRoundProtocol::wait_as_pending(int round,
                                                             Clock::time_point deadline) {
  std::string request;
  std::string answers;
  const auto ask = [&] {
    request = keys_.pending(lease_);
    answers = request + "/";
    rdzv::JoinRequest join;
    join.seq = lease_;
    join.name = options_.node_name;
    join.local_world_size = options_.local_world_size;
    join.settings = options_.must_agree;
    // On this node's lease: the running nodes see it go when this node does.
    client_->put(request, seal(options_.token, request, rdzv::encode_join(join)), lease_);
  };
  ask();
  if (callbacks_.on_waiting) callbacks_.on_waiting("pending");
  bool told_spare = false;
  auto nobody_since = Clock::time_point::max();  // max: a member of the job is alive
  while (true) {
    if (cancel_) throw std::runtime_error("the join was cancelled");
    if (lease_ended_) {  // its request went with its lease: ask again on a new one
      renew_lease();
      ask();
    }
    auto read = client_->range(answers, prefix_end(answers));
    for (const auto& kv : read.kvs) {
      auto payload = unseal(options_.token, kv.key, kv.value);
      if (!payload) continue;  // a stranger's answer is no answer
      if (kv.key == keys_.pending_invite(lease_)) {
        const auto verdict = decode_pending_verdict(*payload);
        if (!verdict) {
          throw rdzv::RendezvousError(
              fmt::format("job '{}' on etcd: malformed invitation '{}' for this node",
                          options_.run_id, *payload));
        }
        if (verdict->invitation) return *verdict->invitation;
        throw rdzv::RendezvousError(fmt::format("job '{}' on etcd refused this node ({}): {}",
                                                options_.run_id, options_.node_name,
                                                verdict->refused));
      }
      if (kv.key == keys_.pending_spare(lease_) && !told_spare) {
        told_spare = true;
        if (callbacks_.on_waiting) callbacks_.on_waiting("spare");
      }
    }
    // The job may have ended meanwhile: then nobody will answer. Held for a lease's lifetime (a
    // killed member's keys outlive it by that much; a re-form keeps its old round's keys).
    if (job_has_live_member(round)) {
      nobody_since = Clock::time_point::max();
    } else if (nobody_since == Clock::time_point::max()) {
      nobody_since = now();
    } else if (now() - nobody_since >= options_.heartbeat_timeout) {
      // A fresh node that no running node ever answered found the job dead on arrival (all its
      // agents killed just before this run; their leases outlived them): the next generation is
      // its job. A spare the job answered saw it alive and waited for it: it ends (69).
      if (!ever_formed_ && !told_spare) return std::nullopt;
      throw rdzv::RendezvousError(fmt::format(
          "job '{}' on etcd ended while this node ({}) waited as a pending node: no member of "
          "round {} or later is alive",
          options_.run_id, options_.node_name, round));
    }
    if (now() >= deadline) {
      throw rdzv::RendezvousError(fmt::format(
          "job '{}' on etcd: waited {} s as a pending node ({}) and the running nodes never "
          "admitted it (the job is full and lost no node, or it ended)",
          options_.run_id,
          std::chrono::duration_cast<std::chrono::seconds>(options_.join_timeout).count(),
          options_.node_name));
    }
    const auto wait = std::min<Clock::duration>(deadline - now(), std::chrono::seconds(1));
    (void)client_->wait_for_change(
        answers, prefix_end(answers), read.revision + 1,
        std::max(std::chrono::duration_cast<milliseconds>(wait), milliseconds(10)));
  }
}

bool EtcdRoundProtocol::job_has_live_member(int from_round) {
  // Rounds follow one another without gaps; each member's alive key lives on its lease.
  for (int r = from_round; client_->range(keys_.record(r)).kvs.size() == 1; ++r) {
    const std::string alive = keys_.alive_prefix(r);
    if (!client_->range(alive, prefix_end(alive)).kvs.empty()) return true;
  }
  return false;
}

void EtcdRoundProtocol::seed_pending_board() {
  // The requests made before this round's record (the watch starts there) come from one read;
  // the watch's events after it may overlap it, which the board takes in any order.
  const std::string prefix = keys_.pending_prefix();
  const auto read = client_->range(prefix, prefix_end(prefix));
  std::lock_guard lock(watch_mutex_);
  pending_.clear();
  reported_pending_.clear();
  for (const auto& kv : read.kvs) pending_.put(kv.key, kv.value, kv.create_revision);
  report_pending_if_changed();
}

void EtcdRoundProtocol::report_pending_if_changed() {
  std::vector<rdzv::JoinRequest> live = pending_.live();
  std::vector<std::int64_t> seqs;
  seqs.reserve(live.size());
  for (const auto& j : live) seqs.push_back(j.seq);
  if (seqs == reported_pending_) return;
  reported_pending_ = std::move(seqs);
  if (callbacks_.on_pending) callbacks_.on_pending(live);
}

void EtcdRoundProtocol::start_watch(int round, std::int64_t from_revision,
                                    const RoundRecord& closed) {
  {
    std::lock_guard lock(watch_mutex_);
    watched_.emplace(round, closed);
  }
  // The job's keys, not only the round's: the pending nodes' requests and answers too.
  const std::string prefix = keys_.job();
  WatchTiming timing;
  // No member served the watch for a lease's lifetime since it broke: etcd is lost.
  timing.give_up = lease_ttl_;
  // etcd's progress notifications come every 10 min by default: a silent stream is not proof of
  // a dead one, so silence only moves the watch to another member (lossless: it resumes from the
  // last revision); the per-heartbeat re-read (reread_round) is the proof of losses.
  timing.silence = std::max(2 * options_.heartbeat_interval, milliseconds(1000));
  timing.first_member = client_->current_member();  // the member that answered last
  // The watch thread reads only its own copy of the round (the join goes on meanwhile).
  watch_ = cluster_.watch(
      prefix, prefix_end(prefix), from_revision, timing,
      WatchCallbacks{[this, round, closed](const WatchMessage& m) { on_watch(round, closed, m); },
                     [this](const std::string& error) { report_etcd_lost(error); },
                     [this](std::int64_t) {
                       // etcd compacted the revisions the watch still needed: the round's state
                       // now, and the pending board anew, then the watch goes on from there. No
                       // loss of the job.
                       auto client = cluster_.connect(call_timeout_);
                       const std::int64_t revision = reread_round(*client);
                       const std::string pending = keys_.pending_prefix();
                       const auto read = client->range(pending, prefix_end(pending));
                       std::lock_guard lock(watch_mutex_);
                       pending_.clear();
                       for (const auto& kv : read.kvs)
                         pending_.put(kv.key, kv.value, kv.create_revision);
                       report_pending_if_changed();
                       return std::min(revision, read.revision) + 1;
                     }});
}

namespace {
// The node rank a key under `prefix` names when it is a member's of `closed` (nullopt: a
// stranger's key, or not a number).
std::optional<int> member_rank_in(const std::string& key, const std::string& prefix,
                                  const RoundRecord& closed) {
  int rank = -1;
  const char* end = key.data() + key.size();
  auto [at, ec] = std::from_chars(key.data() + prefix.size(), end, rank);
  if (ec != std::errc{} || at != end || rank < 0 || rank >= static_cast<int>(closed.members.size()))
    return std::nullopt;
  return rank;
}
}  // namespace

void EtcdRoundProtocol::on_watch(int round, const RoundRecord& closed,
                                 const WatchMessage& message) {
  const std::string alive_prefix = keys_.alive_prefix(round);
  const std::string done_prefix = keys_.done_prefix(round);
  const std::string left_prefix = keys_.left_prefix(round);
  const std::string pending_prefix = keys_.pending_prefix();
  const auto my_rank = node_rank_of(closed, lease_);
  bool pending_changed = false;
  const std::string progress_prefix = keys_.progress_prefix(round);
  const std::string view_prefix = keys_.view_prefix(round);
  // Each event by the kind of key it is: the job's pending board, then the round's keys.
  for (const auto& e : message.events) {
    const std::string& key = e.kv.key;
    const bool put = e.type == WatchEvent::Type::Put;
    if (key.starts_with(pending_prefix)) {
      on_pending_event(e);
      pending_changed = true;
    } else if (put && key.starts_with(progress_prefix)) {
      on_progress_put(round, closed, my_rank, e.kv);
    } else if (put && key.starts_with(view_prefix)) {
      on_view_put(round, closed, my_rank, e.kv);
    } else if (put && key == keys_.stop(round)) {
      on_stop_put(e.kv);
    } else if (put && key.starts_with(left_prefix)) {
      if (!unseal(options_.token, key, e.kv.value)) continue;
      int rank = -1;
      std::from_chars(key.data() + left_prefix.size(), key.data() + key.size(), rank);
      std::lock_guard lock(watch_mutex_);
      left_ranks_.insert(rank);
    } else if (put && key.starts_with(done_prefix)) {
      if (!unseal(options_.token, key, e.kv.value)) continue;
      int rank = -1;
      std::from_chars(key.data() + done_prefix.size(), key.data() + key.size(), rank);
      std::lock_guard lock(watch_mutex_);
      done_ranks_[rank] = e.kv.mod_revision;
    } else if (e.type == WatchEvent::Type::Delete && key.starts_with(alive_prefix)) {
      on_alive_deleted(round, closed, my_rank, key, message);
    }
  }
  if (pending_changed) {
    std::lock_guard lock(watch_mutex_);
    report_pending_if_changed();
  }
}

void EtcdRoundProtocol::on_pending_event(const WatchEvent& e) {
  std::lock_guard lock(watch_mutex_);
  if (e.type == WatchEvent::Type::Put)
    pending_.put(e.kv.key, e.kv.value, e.kv.create_revision);
  else
    pending_.erase(e.kv.key);
}

void EtcdRoundProtocol::on_progress_put(int round, const RoundRecord& closed,
                                        std::optional<int> my_rank, const KeyValue& kv) {
  const auto rank = member_rank_in(kv.key, keys_.progress_prefix(round), closed);
  if (!rank || rank == my_rank) return;
  const auto payload = unseal(options_.token, kv.key, kv.value);
  const auto progress = payload ? rdzv::decode_node_progress(*payload) : std::nullopt;
  if (!progress) return;
  std::optional<long long> best;
  bool others_started = true;
  {
    std::lock_guard lock(watch_mutex_);
    // From none (as each round starts) to something is progress; the same value is not.
    rdzv::NodeProgress& seen = progress_seen_[*rank];
    if (seen == *progress) return;
    seen = *progress;
    std::size_t started = 0;
    for (const auto& [r, p] : progress_seen_) {
      if (p.best_step && (!best || *p.best_step > *best)) best = *p.best_step;
      if (p.all_started) ++started;
    }
    // A member that published nothing yet has not started.
    others_started = started + 1 >= closed.members.size();
  }
  if (callbacks_.on_progress_elsewhere) callbacks_.on_progress_elsewhere(best, others_started);
}

void EtcdRoundProtocol::on_view_put(int round, const RoundRecord& closed,
                                    std::optional<int> my_rank, const KeyValue& kv) {
  const auto rank = member_rank_in(kv.key, keys_.view_prefix(round), closed);
  if (!rank || !my_rank || rank == my_rank) return;
  auto payload = unseal(options_.token, kv.key, kv.value);
  if (!payload) return;  // a stranger's record is no view
  bool oversized_now = false;
  {
    std::lock_guard lock(watch_mutex_);
    if (oversized_views_.count(*rank)) return;
    if (payload->size() > rdzv::kMaxViewBytes) {
      // Not ddprun's (an agent never publishes one): once per node and round, then that
      // node's ranks are not shown, as on c10d; before, dropped without a word.
      oversized_views_.insert(*rank);
      views_seen_.erase(*rank);
      oversized_now = true;
    } else {
      views_seen_[*rank] = std::move(*payload);
    }
    report_views(closed, *my_rank);
  }
  if (oversized_now) note(oversized_view_line(*rank, kv.key));
}

void EtcdRoundProtocol::on_stop_put(const KeyValue& kv) {
  auto payload = unseal(options_.token, kv.key, kv.value);
  if (!payload) return;  // a stranger's stop is no stop
  {
    std::lock_guard lock(watch_mutex_);
    if (stop_seen_) return;
    stop_seen_ = true;
  }
  if (callbacks_.on_stop) callbacks_.on_stop(*payload);
}

void EtcdRoundProtocol::on_alive_deleted(int round, const RoundRecord& closed,
                                         std::optional<int> my_rank, const std::string& key,
                                         const WatchMessage& message) {
  auto lease = lease_of_alive_key(key, keys_.alive_prefix(round));
  if (!lease) return;
  if (*lease == lease_) {
    // The others' watches read this as this node's loss: it was dropped (dropped_line).
    report_dropped(round);
    return;
  }
  auto rank = node_rank_of(closed, *lease);
  if (!rank) return;  // not a member of the round as it closed
  bool left = false;
  {
    std::lock_guard lock(watch_mutex_);
    // A node that finished its workers and left is no loss.
    if (done_ranks_.count(*rank) || !lost_ranks_.insert(*rank).second) return;
    if (my_rank) report_views(closed, *my_rank);  // before the loss: the view shows it lost
    left = left_ranks_.count(*rank) > 0;
  }
  // A cleanup (`etcdctl del --prefix`) deletes the record, which no lease holds, with it.
  const bool with_round_keys =
      std::any_of(message.events.begin(), message.events.end(), [&](const WatchEvent& other) {
        return other.type == WatchEvent::Type::Delete && other.kv.key == keys_.record(round);
      });
  if (callbacks_.on_lost) {
    callbacks_.on_lost(
        alive_gone_text(*rank, closed.members.at(*rank).name, why_alive_gone(left, with_round_keys),
                        static_cast<double>(lease_ttl_.count())),
        *rank);
  }
}

std::string EtcdRoundProtocol::offer_stop(const std::string& payload) {
  if (!joined_ || !client_) return payload;
  const std::string key = keys_.stop(joined_->round);
  const std::string sealed = seal(options_.token, key, payload);
  try {
    // The first valid reason wins: create if absent, or write over a stranger's value.
    for (int tries = 0; tries < 5; ++tries) {
      auto read = client_->range(key);
      std::int64_t stranger = 0;
      if (!read.kvs.empty()) {
        if (auto held = unseal(options_.token, key, read.kvs[0].value))
          return *held;  // the first valid reason (maybe this one)
        stranger = read.kvs[0].mod_revision;
      }
      const Compare cmp = stranger == 0 ? Compare{key, Compare::Target::Create, 0, {}}
                                        : Compare{key, Compare::Target::Mod, stranger, {}};
      if (client_->txn({cmp}, {put_op(key, sealed)}).succeeded) return payload;
    }
  } catch (const std::exception& e) {
    report_etcd_lost(e.what());
  }
  return payload;
}

void EtcdRoundProtocol::invite(const std::vector<std::int64_t>& admitted, int nodes,
                               int first_rank) {
  if (!joined_ || !client_) return;
  try {
    for (std::size_t j = 0; j < admitted.size(); ++j) {
      const std::string key = keys_.pending_invite(admitted[j]);
      const Invitation invitation{joined_->round + 1, nodes, first_rank + static_cast<int>(j)};
      client_->put(key, seal(options_.token, key, encode_invitation(invitation)));
    }
  } catch (const std::exception& e) {
    report_etcd_lost(e.what());
  }
}

void EtcdRoundProtocol::put_answer(const std::string& key, const std::string& value) {
  if (!client_) return;
  try {
    client_->put(key, seal(options_.token, key, value));
  } catch (const std::exception& e) {
    report_etcd_lost(e.what());
  }
}

void EtcdRoundProtocol::mark_spare(std::int64_t seq) { put_answer(keys_.pending_spare(seq), "1"); }

void EtcdRoundProtocol::refuse(std::int64_t seq, const std::string& reason) {
  put_answer(keys_.pending_invite(seq), encode_refusal(reason));
}

void EtcdRoundProtocol::invite_restart(std::int64_t seq, int round) {
  put_answer(keys_.pending_invite(seq), encode_invitation(Invitation{round, 0, 0}));
}

void EtcdRoundProtocol::note_view(std::string record) {
  std::lock_guard lock(view_mutex_);
  view_record_ = std::move(record);
}

void EtcdRoundProtocol::report_views(const RoundRecord& closed, int my_rank) {
  if (!callbacks_.on_views) return;
  std::vector<rdzv::NodeView> views;
  for (int r = 0; r < static_cast<int>(closed.members.size()); ++r) {
    if (r == my_rank) continue;
    auto seen = views_seen_.find(r);
    views.push_back(rdzv::NodeView{r, closed.members[r].name,
                                   seen == views_seen_.end() ? std::string() : seen->second,
                                   lost_ranks_.count(r) > 0});
  }
  callbacks_.on_views(views);
}

EtcdRoundProtocol::BarrierResult EtcdRoundProtocol::exit_barrier() {
  BarrierResult result;
  in_barrier_ = true;
  try {
    if (!joined_ || !client_) throw std::runtime_error("not joined");
    const int round = joined_->round;
    const std::string mine = keys_.done(round, joined_->node_rank);
    client_->put(mine, seal(options_.token, mine, "1"));
    const std::string prefix = keys_.round(round);
    std::set<int> told_deleted;
    auto gone_since = Clock::time_point::max();  // max: every missing node is alive
    while (!cancel_) {
      const BarrierRead read = read_barrier(round);
      if (read.stop) {
        result = BarrierResult{BarrierResult::End::Stopped, *read.stop, {}};
        break;
      }
      const BarrierVerdict verdict =
          barrier_verdict(closed_round_, arrived_at_barrier(round, read, told_deleted), read.alive);
      if (verdict.all_arrived) break;
      if (auto lost = barrier_loss(round, verdict, gone_since)) {
        result = std::move(*lost);
        break;
      }
      (void)client_->wait_for_change(prefix, prefix_end(prefix), read.revision + 1,
                                     options_.heartbeat_interval);
    }
  } catch (const std::exception& e) {
    // This node's workers succeeded (the barrier is only entered then) and etcd cannot say how
    // the others did: keep the local result, as torchrun keeps success on an exit-barrier
    // error. A peer's failure or loss seen before (the watch) has already ended the attempt.
    note(
        fmt::format("warning: the exit barrier could not complete: {}{}; this node's workers "
                    "succeeded and it ends with their result",
                    std::string_view(e.what()).find("etcd") == std::string_view::npos
                        ? fmt::format("etcd at {}: ", options_.endpoints)
                        : std::string(),
                    e.what()));
    result = BarrierResult{};
  }
  in_barrier_ = false;
  return result;
}

EtcdRoundProtocol::BarrierRead EtcdRoundProtocol::read_barrier(int round) {
  const std::string prefix = keys_.round(round);
  const std::string done_prefix = keys_.done_prefix(round);
  const std::string alive_prefix = keys_.alive_prefix(round);
  auto read = client_->range(prefix, prefix_end(prefix));
  BarrierRead out;
  out.revision = read.revision;
  for (const auto& kv : read.kvs) {
    if (kv.key == keys_.stop(round)) {
      out.stop = unseal(options_.token, kv.key, kv.value);
    } else if (kv.key.starts_with(done_prefix) && unseal(options_.token, kv.key, kv.value)) {
      int rank = -1;
      std::from_chars(kv.key.data() + done_prefix.size(), kv.key.data() + kv.key.size(), rank);
      out.done.insert(rank);
    } else if (auto lease = lease_of_alive_key(kv.key, alive_prefix)) {
      out.alive[*lease] = kv.mod_revision;
    }
  }
  return out;
}

std::set<int> EtcdRoundProtocol::arrived_at_barrier(int round, const BarrierRead& read,
                                                    std::set<int>& told_deleted) {
  // A node that arrived has arrived: its done key, once the watch saw it, counts even when
  // someone deleted it afterwards (an operator's cleanup run early, a stranger).
  std::set<int> arrived = read.done;
  std::set<int> deleted;  // seen arriving at or before this read, gone from it
  {
    std::lock_guard lock(watch_mutex_);
    for (const auto& [rank, revision] : done_ranks_) {
      arrived.insert(rank);
      if (!read.done.count(rank) && revision <= read.revision) deleted.insert(rank);
    }
  }
  arrived.insert(joined_->node_rank);
  for (const int rank : deleted) {
    if (rank < 0 || rank >= joined_->num_nodes || !told_deleted.insert(rank).second) continue;
    note(
        fmt::format("exit barrier: the key {} of node {} ({}) was deleted after it arrived "
                    "(by someone else); it still counts as arrived",
                    keys_.done(round, rank), rank, closed_round_.members.at(rank).name));
  }
  return arrived;
}

std::optional<EtcdRoundProtocol::BarrierResult> EtcdRoundProtocol::barrier_loss(
    int round, const BarrierVerdict& verdict, Clock::time_point& gone_since) {
  // The bound: a node that did not arrive and whose lease ended will never arrive. The
  // watch reports such a loss at once; this holds even when the watch missed it.
  if (verdict.gone.empty()) {
    gone_since = Clock::time_point::max();
    return std::nullopt;
  }
  if (gone_since == Clock::time_point::max()) gone_since = now();
  if (now() - gone_since < options_.heartbeat_timeout) return std::nullopt;
  return BarrierResult{
      BarrierResult::End::Lost,
      {},
      fmt::format("exit barrier of round {} of job '{}' on etcd: {} did "
                  "not arrive and {} etcd lease ended (arrived: {})",
                  round, options_.run_id, verdict.gone, verdict.gone_count == 1 ? "its" : "their",
                  verdict.arrived_text)};
}

void EtcdRoundProtocol::leave() {
  // Nobody needs to wait for this node: the outcome is in etcd, not in its store.
  watch_.reset();
  stop_keepalive();
  leave_etcd();
}

}  // namespace ddp::rdzv::etcd
