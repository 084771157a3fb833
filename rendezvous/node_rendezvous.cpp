#include "rendezvous/node_rendezvous.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "rendezvous/log.hpp"
#include "rendezvous/token_auth.hpp"

namespace ddp::rdzv {
namespace {

using namespace std::chrono_literals;

// Store keys (StoreClient adds the leading "/"):
//   ddprun/<run_id>/<round>/arrivals        ADD counter handing out arrival numbers
//   .../join/<seq>                           JSON JoinRequest
//   .../verdict/<seq>                        "ok" or "refused: <reason>"
//   .../assignment                           JSON Assignment, written before any "ok"
//   .../closed                               "1" once the leader stopped admitting
//   .../status                               leader's one-line progress (for timeout messages)
//   ddprun/<run_id>/leader                   static node 0's name, set when it first joins
//   .../ack/<seq>                            "1": this arrival read why the leader failed the round
//   .../hb/<node_rank>                       heartbeat counters
//   .../stop                                 first stop reason (COMPARE_SET from "")
//   .../done                                 ADD counter: nodes whose workers finished
//   .../end                                  "done" (all finished) or "stop", first writer wins;
//                                            the one key the exit barrier WAITs on
//   .../left                                 ADD counter: nodes that left the round
//   .../all_left                             "1", set by the last node to leave
//   .../workers_cleared                      "<n>", set by node 0 once the previous attempt's
//                                            workers' keys (n of them) are gone
std::string key_prefix(const NodeRendezvousOptions& o) {
  return fmt::format("ddprun/{}/{}/", o.run_id, o.round);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

constexpr auto kPollSlice = 100ms;

bool wait_for(StoreClient& client, const std::string& key, std::chrono::milliseconds budget) {
  try {
    client.wait({key}, std::max(budget, 1ms));
    return true;
  } catch (const StoreTimeoutError&) {
    return false;
  }
}

// How long a leader that failed the round keeps waiting for the others to read why (its agent
// exits afterwards, and the store with it when it hosts it).
constexpr auto kFailureReadBudget = 5s;

// The leader failed the round: "closed" and "status" are set. Every node that arrived so far
// acknowledges once it has read them (ack/<arrival>); wait for that, bounded.
void await_failure_read(StoreClient& client, const std::string& prefix, std::int64_t own_seq) {
  const auto until = RdzvClock::now() + kFailureReadBudget;
  const std::int64_t arrived = client.add(prefix + "arrivals", 0);
  for (std::int64_t seq = 1; seq <= arrived; ++seq) {
    if (seq == own_seq) continue;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - RdzvClock::now());
    if (left <= 0ms || !wait_for(client, prefix + "ack/" + std::to_string(seq), left)) return;
  }
}

Assignment lead(StoreClient& client, const std::string& prefix, const NodeRendezvousOptions& o,
                const std::string& leader_name, std::int64_t own_seq,
                RdzvClock::time_point deadline) {
  Admission admission(AdmissionPolicy{o.min_nodes, o.max_nodes, o.node_rank >= 0, o.must_agree,
                                      leader_name, o.run_id, o.last_call_timeout});
  std::int64_t next = 1;
  while (!admission.complete(RdzvClock::now())) {
    const auto now = RdzvClock::now();
    if (now >= deadline) {
      const std::string status = admission.describe();
      client.set(prefix + "status", status);
      client.set(prefix + "closed", "1");
      await_failure_read(client, prefix, own_seq);
      throw RendezvousError(fmt::format(
          "rendezvous '{}' timed out after {} s: {}", o.run_id,
          std::chrono::duration_cast<std::chrono::seconds>(o.join_timeout).count(), status));
    }
    auto until = deadline;
    if (auto last_call = admission.last_call_deadline()) until = std::min(until, *last_call);
    const std::string join_key = prefix + "join/" + std::to_string(next);
    if (!wait_for(client, join_key,
                  std::chrono::duration_cast<std::chrono::milliseconds>(until - now)))
      continue;
    const std::string verdict_key = prefix + "verdict/" + std::to_string(next);
    auto join = decode_join(client.get(join_key));
    ++next;
    if (!join) {
      log_line(
          fmt::format("rendezvous '{}': ignoring malformed join record {}", o.run_id, join_key));
      client.set(verdict_key, "refused: malformed join record");
      continue;
    }
    const auto decision = admission.offer(*join, RdzvClock::now());
    if (decision.fatal) {
      // The job cannot form: end this round for every node now, not at join_timeout.
      log_line(fmt::format("rendezvous '{}': {}", o.run_id, decision.reason));
      client.set(verdict_key, "refused: " + decision.reason);
      client.set(prefix + "status", decision.reason);
      client.set(prefix + "closed", "1");
      await_failure_read(client, prefix, own_seq);
      throw RendezvousError(fmt::format("rendezvous '{}': {}", o.run_id, decision.reason));
    }
    if (!decision.admitted) {
      log_line(fmt::format("rendezvous '{}': refused join #{} from {}: {}", o.run_id, join->seq,
                           join->name, decision.reason));
      client.set(verdict_key, "refused: " + decision.reason);
    }
    client.set(prefix + "status", admission.describe());
  }
  Assignment assignment = assign_ranks(admission.admitted());
  std::vector<std::string> keys{prefix + "assignment"};
  std::vector<std::string> values{encode_assignment(assignment)};
  for (const auto& n : assignment.nodes) {
    keys.push_back(prefix + "hb/" + std::to_string(n.node_rank));
    values.push_back("0");
  }
  client.multi_set(keys, values);
  keys.clear();
  values.clear();
  for (const auto& n : assignment.nodes) {
    keys.push_back(prefix + "verdict/" + std::to_string(n.seq));
    values.push_back("ok");
  }
  client.multi_set(keys, values);
  client.set(prefix + "closed", "1");  // after the verdicts: a join without one is too late
  return assignment;
}

}  // namespace

StoreClientOptions with_token(StoreClientOptions store, const std::string& token) {
  if (!token.empty()) store.after_connect = token_prover(token);
  return store;
}

namespace {
RendezvousResult join_once(const StoreClientOptions& store, const NodeRendezvousOptions& options);
}  // namespace

RendezvousResult join_rendezvous(const StoreClientOptions& store,
                                 const NodeRendezvousOptions& options) {
  try {
    return join_once(store, options);
  } catch (const StoreAuthError& e) {
    throw RendezvousError(fmt::format("rendezvous '{}': {}", options.run_id, e.what()));
  }
}

namespace {
RendezvousResult join_once(const StoreClientOptions& store, const NodeRendezvousOptions& options) {
  NodeRendezvousOptions o = options;
  if (o.node_name.empty()) o.node_name = host_name();
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes) {
    throw RendezvousError(fmt::format("invalid node range {}:{}", o.min_nodes, o.max_nodes));
  }
  const auto deadline = RdzvClock::now() + o.join_timeout;
  const std::string prefix = key_prefix(o);
  StoreClient client(with_token(store, o.token));
  const std::string leader_key = fmt::format("ddprun/{}/leader", o.run_id);
  if (o.node_rank > 0 && o.round == 0 && o.leader_timeout > 0ms &&
      !wait_for(client, leader_key, o.leader_timeout)) {
    throw RendezvousError(
        fmt::format("rendezvous '{}': node 0 has not joined on the store at {}:{} within {} s: "
                    "that store belongs to another "
                    "job (two jobs on one port?) or node 0 failed to start; check node 0's output "
                    "or pass a free --master_port",
                    o.run_id, store.host, store.port,
                    std::chrono::duration_cast<std::chrono::seconds>(o.leader_timeout).count()));
  }
  if (o.node_rank == 0) client.set(leader_key, o.node_name);

  JoinRequest join;
  join.seq = client.add(prefix + "arrivals", 1);
  join.name = o.node_name;
  join.local_world_size = o.local_world_size;
  join.requested_node_rank = o.node_rank;
  join.settings = o.must_agree;
  client.set(prefix + "join/" + std::to_string(join.seq), encode_join(join));

  const bool leader = o.node_rank >= 0 ? o.node_rank == 0 : join.seq == 1;
  std::optional<Assignment> assignment;
  if (leader) assignment = lead(client, prefix, o, describe_node(join), join.seq, deadline);

  // Tells a leader that failed the round that this node has read why (await_failure_read).
  auto acknowledge = [&] {
    try {
      client.set(prefix + "ack/" + std::to_string(join.seq), "1");
    } catch (const StoreError&) {
      // The leader's store is already gone; this node has its answer anyway.
    }
  };

  const std::string verdict_key = prefix + "verdict/" + std::to_string(join.seq);
  for (;;) {
    if (wait_for(client, verdict_key, kPollSlice)) break;
    if (client.check({prefix + "closed"}) && !client.check({verdict_key})) {
      std::string why = client.check({prefix + "status"}) ? client.get(prefix + "status") : "";
      acknowledge();
      throw RendezvousError(fmt::format("rendezvous '{}' closed without admitting {}{}{}", o.run_id,
                                        describe_node(join), why.empty() ? "" : ": ", why));
    }
    if (RdzvClock::now() >= deadline) {
      std::string why = client.check({prefix + "status"}) ? client.get(prefix + "status")
                                                          : "the leader never answered";
      throw RendezvousError(fmt::format(
          "rendezvous '{}' timed out after {} s waiting to be admitted: {}", o.run_id,
          std::chrono::duration_cast<std::chrono::seconds>(o.join_timeout).count(), why));
    }
  }
  const std::string verdict = client.get(verdict_key);
  if (verdict != "ok") {
    acknowledge();
    throw RendezvousError(fmt::format("rendezvous '{}' {}", o.run_id, verdict));
  }
  if (!assignment) assignment = decode_assignment(client.get(prefix + "assignment"));
  if (!assignment) throw RendezvousError("rendezvous assignment record is malformed");

  RendezvousResult result;
  result.assignment = *assignment;
  result.num_nodes = static_cast<int>(assignment->nodes.size());
  result.world_size = assignment->world_size;
  for (const auto& n : assignment->nodes) {
    if (n.seq == join.seq) {
      result.node_rank = n.node_rank;
      result.base_rank = n.base_rank;
      result.local_world_size = n.local_world_size;
    }
  }
  return result;
}
}  // namespace

namespace {
// The monitor must notice a dead store within the heartbeat timeout, not after the default
// minutes-long connect and call timeouts.
StoreClientOptions monitor_client_options(StoreClientOptions store,
                                          const NodeMonitor::Options& options) {
  store.connect_timeout = options.heartbeat_timeout;
  store.timeout = options.heartbeat_timeout;
  store.max_backoff = std::min(store.max_backoff, options.heartbeat_interval);
  return store;
}
}  // namespace

NodeMonitor::NodeMonitor(const StoreClientOptions& store, const NodeRendezvousOptions& rendezvous,
                         const RendezvousResult& joined, Options options, Callbacks callbacks)
    : round_(rendezvous),
      client_(with_token(monitor_client_options(store, options), rendezvous.token)),
      control_(with_token(store, rendezvous.token)),
      prefix_(key_prefix(rendezvous)),
      joined_(joined),
      options_(options),
      callbacks_(std::move(callbacks)),
      thread_([this] { run(); }) {}

NodeMonitor::~NodeMonitor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::string NodeMonitor::broadcast_stop(const std::string& reason) {
  return rdzv::broadcast_stop(control_, round_, reason);
}

void NodeMonitor::run() {
  struct Seen {
    std::string value;
    RdzvClock::time_point changed;
    bool reported = false;
  };
  std::vector<std::string> keys;
  for (const auto& n : joined_.assignment.nodes)
    keys.push_back(prefix_ + "hb/" + std::to_string(n.node_rank));
  std::map<int, Seen> seen;
  const std::string my_key = prefix_ + "hb/" + std::to_string(joined_.node_rank);
  bool stop_reported = false;
  bool store_lost_reported = false;
  auto store_answered = RdzvClock::now();
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    const auto now = RdzvClock::now();
    try {
      client_.add(my_key, 1);
      const auto values = client_.multi_get(keys);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const auto& node = joined_.assignment.nodes[i];
        auto [it, fresh] = seen.try_emplace(node.node_rank, Seen{values[i], now});
        if (fresh || it->second.value != values[i]) {
          it->second = Seen{values[i], now, false};
        } else if (!it->second.reported && node.node_rank != joined_.node_rank &&
                   now - it->second.changed > options_.heartbeat_timeout) {
          it->second.reported = true;
          if (callbacks_.on_node_lost) callbacks_.on_node_lost(node);
        }
      }
      if (!stop_reported && client_.check({prefix_ + "stop"})) {
        stop_reported = true;
        if (callbacks_.on_stop) callbacks_.on_stop(client_.get(prefix_ + "stop"));
      }
      store_answered = RdzvClock::now();
    } catch (const StoreError& e) {
      // The store's host is gone: nobody can heartbeat any more, so this is reported once.
      if (!store_lost_reported && RdzvClock::now() - store_answered > options_.heartbeat_timeout) {
        store_lost_reported = true;
        if (callbacks_.on_store_lost) callbacks_.on_store_lost(e.what());
      }
    }
    std::unique_lock lock(mutex_);
    wake_.wait_until(lock, now + options_.heartbeat_interval, [this] { return stopping_; });
  }
}

std::string broadcast_stop(StoreClient& client, const NodeRendezvousOptions& round,
                           const std::string& reason) {
  const std::string prefix = key_prefix(round);
  std::string in_force = client.compare_set(prefix + "stop", "", reason);
  client.compare_set(prefix + "end", "", "stop");  // wakes every node waiting in the exit barrier
  return in_force;
}

ExitBarrierResult exit_barrier(StoreClient& client, const NodeRendezvousOptions& round,
                               const RendezvousResult& joined, std::chrono::milliseconds slice,
                               const std::function<bool()>& keep_waiting) {
  const std::string prefix = key_prefix(round);
  const std::string end_key = prefix + "end";
  // The last node to arrive ends the barrier for everyone; a stop broadcast may have ended it
  // first.
  if (client.add(prefix + "done", 1) >= joined.num_nodes) client.compare_set(end_key, "", "done");
  while (!wait_for(client, end_key, slice)) {
    if (!keep_waiting()) return {ExitBarrierResult::End::Cancelled, {}};
  }
  if (client.get(end_key) == "stop")
    return {ExitBarrierResult::End::Stopped, client.get(prefix + "stop")};
  return {ExitBarrierResult::End::AllDone, {}};
}

void leave_round(StoreClient& client, const NodeRendezvousOptions& round,
                 const RendezvousResult& joined, bool wait_for_others,
                 std::chrono::milliseconds budget, std::chrono::milliseconds slice,
                 const std::function<bool()>& keep_waiting) {
  const std::string prefix = key_prefix(round);
  const auto deadline = RdzvClock::now() + budget;
  if (client.add(prefix + "left", 1) >= joined.num_nodes) client.set(prefix + "all_left", "1");
  if (!wait_for_others) return;
  // A node that is gone never leaves, hence the budget.
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RdzvClock::now());
    if (left <= std::chrono::milliseconds::zero() || !keep_waiting()) return;
    if (wait_for(client, prefix + "all_left", std::min(left, slice))) return;
  }
}

bool is_worker_key(std::string_view key) { return !key.starts_with(kAgentKeySpace); }

std::size_t clear_worker_keys(StoreClient& client) {
  std::size_t deleted = 0;
  for (const std::string& key : client.list_keys()) {
    if (is_worker_key(key) && client.delete_key(key)) ++deleted;
  }
  return deleted;
}

void clear_previous_attempt(StoreClient& client, const NodeRendezvousOptions& round,
                            const RendezvousResult& joined, std::chrono::milliseconds timeout) {
  if (round.round == 0) return;
  const std::string cleared = key_prefix(round) + "workers_cleared";
  if (joined.node_rank == 0) {
    client.set(cleared, std::to_string(clear_worker_keys(client)));
    return;
  }
  if (!wait_for(client, cleared, timeout)) {
    throw RendezvousError(
        fmt::format("rendezvous '{}' round {}: node 0 did not clear the previous attempt's worker "
                    "keys within {} ms",
                    round.run_id, round.round, timeout.count()));
  }
}

}  // namespace ddp::rdzv
