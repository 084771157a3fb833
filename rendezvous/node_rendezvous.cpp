#include "rendezvous/node_rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include <fmt/format.h>

#include "common/host_name.hpp"
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
//   .../lost                                 why the round cannot form: nodes of the round before
//                                            stopped heartbeating (set before "closed")
//   .../leader_beat                          a re-form's or restart's leader's counter while it
//                                            leads
//   ddprun/<run_id>/leader                   static node 0's name, set when it first joins
//   .../ack/<seq>                            "1": this arrival read why the leader failed the round
//   .../hb/<node_rank>                       heartbeat counters
//   .../progress/<node_rank>                 NodeProgress, "0" until the node's ranks progress
//   .../view/<node_rank>                     the node's record for the job-wide view (JSON,
//                                            launcher/health/job_view.hpp), "" until published
//   .../stop                                 first stop reason (COMPARE_SET from "")
//   .../done                                 ADD counter: nodes whose workers finished
//   .../end                                  "done" (all finished) or "stop", first writer wins;
//                                            the one key the exit barrier WAITs on
//   .../left                                 ADD counter: nodes that left the round
//   .../all_left                             "1", set by the last node to leave
//   .../workers_cleared                      "<n>", set by node 0 once the previous attempt's
//                                            workers' keys (n of them) are gone
//   ddprun/<run_id>/counts/<round>           "<restarts>|<rescales>" the job had used before
//                                            <round> (set by its nodes that were there before)
//   ddprun/<run_id>/pending/next             ADD counter handing out pending numbers
//   ddprun/<run_id>/pending/<p>              JSON JoinRequest of a node that arrived late
//   .../pending/<p>/hb                       its heartbeat counter while it waits
//   .../pending/<p>/invite                   "<round>|<nodes>|<node_rank>" or "refused: <why>"
//   .../pending/<p>/spare                    "1": the job is full, it waits as a spare
std::string round_prefix(const std::string& run_id, int round) {
  return fmt::format("ddprun/{}/{}/", run_id, round);
}

std::string key_prefix(const NodeRendezvousOptions& o) { return round_prefix(o.run_id, o.round); }

std::string progress_key(const std::string& prefix, int node_rank) {
  return prefix + "progress/" + std::to_string(node_rank);
}

std::string view_key(const std::string& prefix, int node_rank) {
  return prefix + "view/" + std::to_string(node_rank);
}

constexpr auto kPollSlice = 100ms;

// A round that watches the round it left (a re-form or a restart, SurvivorWatch): its leader
// beats while it leads, and the nodes waiting for its answer watch that beat.
bool watches_round_left(const NodeRendezvousOptions& o) {
  return o.previous_round >= 0 && o.survivor_heartbeat_timeout.count() > 0 &&
         (!o.survivors_previous_ranks.empty() || o.previous_round_nodes > 0);
}

std::chrono::milliseconds leader_beat_period(const NodeRendezvousOptions& o) {
  return std::clamp(o.survivor_heartbeat_timeout / 4, std::chrono::milliseconds(100),
                    std::chrono::milliseconds(1000));
}

// How many of the latest pending numbers a monitor looks at (late arrivals are few; a counter
// that someone pushed far must not make the heartbeat loop long).
constexpr std::int64_t kMaxPending = 64;

std::string pending_prefix(const std::string& run_id) {
  return fmt::format("ddprun/{}/pending/", run_id);
}

// The round this node tried to join closed without it; an elastic job's node then waits as a
// pending node (join_rendezvous).
class ClosedBeforeAdmitted : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

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

// Paces NodeRendezvousOptions::on_join_progress: once per interval, first after one interval.
class JoinProgressClock {
 public:
  explicit JoinProgressClock(const NodeRendezvousOptions& o)
      : options_(o), start_(RdzvClock::now()), next_(start_ + o.join_progress_interval) {}
  RdzvClock::time_point next() const {
    return options_.on_join_progress ? next_ : RdzvClock::time_point::max();
  }
  template <typename Status>
  void report(RdzvClock::time_point now, const Status& status) {
    if (!options_.on_join_progress || now < next_) return;
    next_ = now + options_.join_progress_interval;
    options_.on_join_progress(std::chrono::duration_cast<std::chrono::milliseconds>(now - start_),
                              status());
  }

 private:
  const NodeRendezvousOptions& options_;
  RdzvClock::time_point start_;
  RdzvClock::time_point next_;
};

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

// A re-form's or a restart's leader watches the nodes of the round left that have not joined yet,
// by the heartbeat each one's monitor keeps in that round until it starts to join this one
// (NodeRendezvousOptions::survivors_previous_ranks, previous_node_rank).
// "rank (name)" for node ranks of a formed round, "rank" where its assignment is not readable.
std::string describe_old_ranks(StoreClient& client, const std::string& round_prefix_text,
                               const std::vector<int>& ranks) {
  std::optional<Assignment> old;
  if (client.check({round_prefix_text + "assignment"}))
    old = decode_assignment(client.get(round_prefix_text + "assignment"));
  std::string names;
  for (int rank : ranks) {
    std::string name;
    if (old) {
      for (const auto& n : old->nodes)
        if (n.node_rank == rank) name = fmt::format(" ({})", n.name);
    }
    names += fmt::format("{}{}{}", names.empty() ? "" : ", ", rank, name);
  }
  return names;
}

class SurvivorWatch {
 public:
  explicit SurvivorWatch(const NodeRendezvousOptions& o) : options_(o) {}

  RdzvClock::time_point next() const { return active() ? next_ : RdzvClock::time_point::max(); }

  // "" while the round can still form as it should; else why it cannot (the lost nodes).
  std::string look(StoreClient& client, const std::vector<JoinRequest>& admitted,
                   RdzvClock::time_point now) {
    next_ = now + std::clamp(options_.survivor_heartbeat_timeout / 4,
                             std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
    const std::string old_prefix = round_prefix(options_.run_id, options_.previous_round);
    std::vector<int> gone;
    int beating = 0;  // members not joined yet whose heartbeat still moves
    for (const int old_rank : awaited(admitted)) {
      const std::string key = old_prefix + "hb/" + std::to_string(old_rank);
      const std::string beat = client.check({key}) ? client.get(key) : std::string();
      auto [it, fresh] = beats_.try_emplace(old_rank, Beat{beat, now});
      if (!fresh && it->second.value != beat) it->second = Beat{beat, now};
      if (!fresh && now - it->second.changed > options_.survivor_heartbeat_timeout) {
        gone.push_back(old_rank);
      } else {
        ++beating;
      }
    }
    if (gone.empty()) return {};
    const bool restart = options_.survivors_previous_ranks.empty();
    // The leader's own join may not be read yet: it counts as admitted either way.
    const bool own_admitted = std::any_of(admitted.begin(), admitted.end(), [&](const auto& j) {
      return restart ? j.previous_node_rank == options_.previous_node_rank
                     : j.requested_node_rank == options_.node_rank;
    });
    const int can_meet = static_cast<int>(admitted.size()) + (own_admitted ? 0 : 1) + beating;
    if (restart && can_meet >= options_.min_nodes) return {};  // it forms without them
    const std::string names = describe_old_ranks(client, old_prefix, gone);
    std::string text = fmt::format(
        "node{} {} of the round left did not rejoin: no heartbeat for {:.3g} s (lost with it)",
        gone.size() == 1 ? "" : "s", names,
        std::chrono::duration<double>(options_.survivor_heartbeat_timeout).count());
    if (restart) {
      text = fmt::format(
          "lost node{} {} while the job restarted: no heartbeat for {:.3g} s; {} "
          "node{} can meet, fewer than the minimum of {}",
          gone.size() == 1 ? "" : "s", names,
          std::chrono::duration<double>(options_.survivor_heartbeat_timeout).count(), can_meet,
          can_meet == 1 ? "" : "s", options_.min_nodes);
    }
    return text;
  }

 private:
  bool active() const {
    return options_.previous_round >= 0 && options_.survivor_heartbeat_timeout.count() > 0 &&
           (!options_.survivors_previous_ranks.empty() || options_.previous_round_nodes > 0);
  }
  // The old ranks of the nodes this round still waits for (not this node, not admitted yet).
  std::vector<int> awaited(const std::vector<JoinRequest>& admitted) const {
    std::vector<int> out;
    const auto& survivors = options_.survivors_previous_ranks;
    if (!survivors.empty()) {  // a re-form: survivor r joins as node rank r
      for (std::size_t r = 0; r < survivors.size(); ++r) {
        const int rank = static_cast<int>(r);
        if (rank == options_.node_rank ||
            std::any_of(admitted.begin(), admitted.end(),
                        [&](const JoinRequest& j) { return j.requested_node_rank == rank; })) {
          continue;
        }
        out.push_back(survivors[r]);
      }
      return out;
    }
    for (int old_rank = 0; old_rank < options_.previous_round_nodes; ++old_rank) {
      if (old_rank == options_.previous_node_rank ||
          std::any_of(admitted.begin(), admitted.end(),
                      [&](const JoinRequest& j) { return j.previous_node_rank == old_rank; })) {
        continue;
      }
      out.push_back(old_rank);
    }
    return out;
  }
  struct Beat {
    std::string value;
    RdzvClock::time_point changed;
  };
  const NodeRendezvousOptions& options_;
  RdzvClock::time_point next_ = RdzvClock::now();
  std::map<int, Beat> beats_;
};

// How a node waiting for its round's leader sees that the leader stopped: neither its beat in
// this round nor, for a re-form's leader (survivor 0) not joined yet, its heartbeat in the round
// left moved for survivor_heartbeat_timeout.
class LeaderWatch {
 public:
  LeaderWatch(const NodeRendezvousOptions& o, bool waiting_for_leader)
      : options_(o), active_(waiting_for_leader && watches_round_left(o)) {}

  bool stopped(StoreClient& client, const std::string& prefix, RdzvClock::time_point now) {
    if (!active_ || now < next_look_) return false;
    next_look_ = now + leader_beat_period(options_);
    std::vector<std::string> keys{prefix + "leader_beat"};
    if (!options_.survivors_previous_ranks.empty()) {
      keys.push_back(round_prefix(options_.run_id, options_.previous_round) + "hb/" +
                     std::to_string(options_.survivors_previous_ranks.front()));
    }
    std::string seen;
    for (const auto& key : keys) seen += (client.check({key}) ? client.get(key) : "-") + "|";
    if (seen != last_) {
      last_ = std::move(seen);
      changed_ = now;
    }
    return now - changed_ > options_.survivor_heartbeat_timeout;
  }

  // "node 0 (host-a)": the leader's rank in the round left and its name there.
  std::string describe(StoreClient& client, const std::string& prefix) const {
    int old_rank = -1;
    if (!options_.survivors_previous_ranks.empty()) {
      old_rank = options_.survivors_previous_ranks.front();
    } else if (client.check({prefix + "join/1"})) {  // a restart's leader: the first arrival
      if (auto j = decode_join(client.get(prefix + "join/1"))) old_rank = j->previous_node_rank;
    }
    const std::string who =
        old_rank >= 0
            ? "node " + describe_old_ranks(client,
                                           round_prefix(options_.run_id, options_.previous_round),
                                           {old_rank})
            : std::string("the first to arrive");
    return fmt::format(
        "lost the round's leader, {} of the round left, while the job {}: no sign "
        "of it for {:.3g} s",
        who, options_.survivors_previous_ranks.empty() ? "restarted" : "re-formed",
        std::chrono::duration<double>(options_.survivor_heartbeat_timeout).count());
  }

 private:
  const NodeRendezvousOptions& options_;
  bool active_;
  RdzvClock::time_point next_look_ = RdzvClock::now();
  RdzvClock::time_point changed_ = RdzvClock::now();
  std::string last_;
};

// Ends a round that cannot form: its status for the nodes that joined, "closed", then a bounded
// wait until they have read it.
void close_failed_round(StoreClient& client, const std::string& prefix, std::int64_t own_seq,
                        const std::string& status) {
  client.set(prefix + "status", status);
  client.set(prefix + "closed", "1");
  await_failure_read(client, prefix, own_seq);
}

// The formed round: the assignment and the per-node keys the monitors read (MULTI_GET waits for
// missing keys), then each member's verdict, then "closed" (after the verdicts: a join without
// one is too late).
void publish_round(StoreClient& client, const std::string& prefix, const Assignment& assignment) {
  std::vector<std::string> keys{prefix + "assignment"};
  std::vector<std::string> values{encode_assignment(assignment)};
  for (const auto& n : assignment.nodes) {
    keys.push_back(prefix + "hb/" + std::to_string(n.node_rank));
    values.push_back("0");
    keys.push_back(progress_key(prefix, n.node_rank));
    values.push_back(encode_node_progress({}));
    keys.push_back(view_key(prefix, n.node_rank));
    values.push_back("");
  }
  client.multi_set(keys, values);
  keys.clear();
  values.clear();
  for (const auto& n : assignment.nodes) {
    keys.push_back(prefix + "verdict/" + std::to_string(n.seq));
    values.push_back("ok");
  }
  client.multi_set(keys, values);
  client.set(prefix + "closed", "1");
}

Assignment lead(StoreClient& client, const std::string& prefix, const NodeRendezvousOptions& o,
                const std::string& leader_name, std::int64_t own_seq,
                RdzvClock::time_point deadline) {
  Admission admission(AdmissionPolicy{o.min_nodes, o.max_nodes, o.node_rank >= 0, o.must_agree,
                                      leader_name, o.run_id, o.last_call_timeout,
                                      o.excluded_hosts});
  std::int64_t next = 1;
  JoinProgressClock progress(o);
  SurvivorWatch survivors(o);
  const bool beats = watches_round_left(o);
  std::int64_t beat = 0;
  auto next_beat = RdzvClock::now();
  while (!admission.complete(RdzvClock::now())) {
    const auto now = RdzvClock::now();
    progress.report(now, [&] { return admission.describe(); });
    if (beats && now >= next_beat) {
      client.set(prefix + "leader_beat", std::to_string(++beat));
      next_beat = now + leader_beat_period(o);
    }
    if (now >= deadline) {
      const std::string status = admission.describe();
      close_failed_round(client, prefix, own_seq, status);
      throw RendezvousError(fmt::format(
          "rendezvous '{}' timed out after {} s: {}", o.run_id,
          std::chrono::duration_cast<std::chrono::seconds>(o.join_timeout).count(), status));
    }
    const std::string join_key = prefix + "join/" + std::to_string(next);
    // A join already written is read first: its node stopped heartbeating to write it.
    if (now >= survivors.next() && !client.check({join_key})) {
      const std::string gone = survivors.look(client, admission.admitted(), now);
      if (!gone.empty()) {
        client.set(prefix + "lost", gone);  // before "closed": the others read it as the cause
        close_failed_round(client, prefix, own_seq, gone);
        throw RoundMembersLostError(fmt::format("rendezvous '{}': {}", o.run_id, gone));
      }
    }
    auto until = deadline;
    if (auto last_call = admission.last_call_deadline()) until = std::min(until, *last_call);
    until = std::min({until, progress.next(), survivors.next(),
                      beats ? next_beat : RdzvClock::time_point::max()});
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
      close_failed_round(client, prefix, own_seq, decision.reason);
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
  publish_round(client, prefix, assignment);
  return assignment;
}

// The file name of a default-id fingerprint ("NAME HASH"), fit for a terminal: it comes from
// another job's command line, so control bytes are escaped.
std::string fingerprint_name(const std::string& fingerprint) {
  std::string out;
  for (unsigned char ch : fingerprint.substr(0, fingerprint.rfind(' '))) {
    if (ch < 0x20 || ch == 0x7f || ch == '\\')
      out += fmt::format("\\x{:02x}", ch);
    else
      out += static_cast<char>(ch);
  }
  return out;
}

std::string fingerprint_hash(const std::string& fingerprint) {
  const size_t space = fingerprint.rfind(' ');
  return space == std::string::npos ? fingerprint : fingerprint.substr(space + 1);
}

}  // namespace

std::optional<std::string> default_id_mismatch(StoreClient& client, const StoreClientOptions& store,
                                               const NodeRendezvousOptions& o) {
  const std::string command_key = fmt::format("ddprun/{}/command", o.run_id);
  const std::string recorded = client.compare_set(command_key, "", o.default_id_command);
  if (fingerprint_hash(recorded) == fingerprint_hash(o.default_id_command)) return std::nullopt;
  return fmt::format(
      "the store at {}:{} has a job under the default --rdzv_id ('{}') that ran another program "
      "({}; this one: {}, different content): if this is another job, give each job its own "
      "--rdzv_id=NAME, the same on all of its nodes",
      store.host, store.port, o.run_id, fingerprint_name(recorded),
      fingerprint_name(o.default_id_command));
}

namespace {}  // namespace

std::string oversized_view_line(int node_rank, const std::string& key) {
  return fmt::format(
      "the job-wide view record of node {} ({}) is larger than {} bytes: not ddprun's; that "
      "node's ranks are not shown for this round",
      node_rank, key, kMaxViewBytes);
}

std::string encode_node_progress(const NodeProgress& p) {
  std::string text =
      p.best_step ? fmt::format("{} {}", p.events, *p.best_step) : std::to_string(p.events);
  if (!p.all_started && p.events > 0) text += kNodeStartingMarker;
  return text;
}

std::optional<NodeProgress> decode_node_progress(std::string_view text) {
  const bool starting = text.ends_with(kNodeStartingMarker);
  if (starting) text.remove_suffix(kNodeStartingMarker.size());
  auto parse = [](std::string_view t, std::int64_t& v) {
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return ec == std::errc{} && end == t.data() + t.size() && !t.empty();
  };
  NodeProgress p;
  const auto space = text.find(' ');
  if (!parse(text.substr(0, space), p.events)) return std::nullopt;
  if (space != std::string_view::npos) {
    std::int64_t step = 0;
    if (!parse(text.substr(space + 1), step)) return std::nullopt;
    p.best_step = step;
  }
  p.all_started = !starting && p.events > 0;
  return p;
}

StoreClientOptions with_token(StoreClientOptions store, const std::string& token) {
  if (!token.empty()) store.after_connect = token_prover(token);
  return store;
}

namespace {
RendezvousResult join_once(const StoreClientOptions& store, const NodeRendezvousOptions& options);

struct Invitation {
  int round = 0;
  int nodes = 0;
  int node_rank = -1;
};

// Waits, heartbeating, until the running nodes invite this node into a round or refuse it.
Invitation wait_as_pending(const StoreClientOptions& store, const NodeRendezvousOptions& o,
                           RdzvClock::time_point deadline) {
  StoreClient client(with_token(store, o.token));
  const std::string base = pending_prefix(o.run_id);
  JoinRequest join;
  join.seq = client.add(base + "next", 1);
  join.name = o.node_name;
  join.local_world_size = o.local_world_size;
  join.settings = o.must_agree;
  const std::string own = base + std::to_string(join.seq);
  client.add(own + "/hb", 1);
  client.set(own, encode_join(join));  // after the heartbeat: the monitors judge it live at once
  if (o.on_waiting) o.on_waiting("pending");
  bool told_spare = false;
  const std::string invite_key = own + "/invite";
  for (;;) {
    if (wait_for(client, invite_key, std::max(o.pending_heartbeat, 10ms))) break;
    client.add(own + "/hb", 1);
    if (!told_spare && client.check({own + "/spare"})) {
      told_spare = true;
      if (o.on_waiting) o.on_waiting("spare");
    }
    if (RdzvClock::now() >= deadline) {
      throw RendezvousError(fmt::format(
          "rendezvous '{}': waited {} s as a pending node ({}) and the running nodes never "
          "admitted it (the job is full and lost no node, or its nodes do not admit late arrivals)",
          o.run_id, std::chrono::duration_cast<std::chrono::seconds>(o.join_timeout).count(),
          describe_node(join)));
    }
  }
  const std::string value = client.get(invite_key);
  if (value.rfind("refused: ", 0) == 0) {
    throw RendezvousError(fmt::format("rendezvous '{}' refused {}: {}", o.run_id,
                                      describe_node(join), value.substr(9)));
  }
  Invitation invitation;
  if (std::sscanf(value.c_str(), "%d|%d|%d", &invitation.round, &invitation.nodes,
                  &invitation.node_rank) != 3 ||
      invitation.round < 0 || invitation.nodes < 0 ||
      (invitation.nodes > 0 &&
       (invitation.node_rank < 0 || invitation.node_rank >= invitation.nodes))) {
    throw RendezvousError(fmt::format("rendezvous '{}': malformed invitation '{}' for {}", o.run_id,
                                      value, describe_node(join)));
  }
  return invitation;
}
}  // namespace

RendezvousResult join_rendezvous(const StoreClientOptions& store,
                                 const NodeRendezvousOptions& options) {
  const auto deadline = RdzvClock::now() + options.join_timeout;
  try {
    try {
      return join_once(store, options);
    } catch (const ClosedBeforeAdmitted&) {
      // The job runs without this node: wait to be admitted into a later round.
      NodeRendezvousOptions invited = options;
      if (invited.node_name.empty()) invited.node_name = host_name();
      const Invitation invitation = wait_as_pending(store, invited, deadline);
      invited.round = invitation.round;
      if (invitation.nodes > 0) {  // a re-form: exactly these nodes, this one at node_rank
        invited.min_nodes = invited.max_nodes = invitation.nodes;
        invited.node_rank = invitation.node_rank;
      }  // else a restart's round, met as configured
      invited.may_wait_pending = false;
      invited.join_timeout = std::max<std::chrono::milliseconds>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RdzvClock::now()),
          options.last_call_timeout);
      // The budgets this node counted include the restart whose round went on without it (the
      // running nodes counted that one as a membership change): publishing them would overwrite
      // the job's figures for the round (the last writer wins), so this node only reads them.
      invited.restarts_used = invited.rescales_used = -1;
      RendezvousResult result = join_once(store, invited);
      result.was_pending = true;
      return result;
    }
  } catch (const StoreAuthError& e) {
    throw RendezvousError(fmt::format("rendezvous '{}': {}", options.run_id, e.what()));
  }
}

void invite_pending(StoreClient& client, const std::string& run_id, std::int64_t seq, int round,
                    int nodes, int node_rank) {
  client.set(pending_prefix(run_id) + std::to_string(seq) + "/invite",
             fmt::format("{}|{}|{}", round, nodes, node_rank));
}

void refuse_pending(StoreClient& client, const std::string& run_id, std::int64_t seq,
                    const std::string& reason) {
  client.set(pending_prefix(run_id) + std::to_string(seq) + "/invite", "refused: " + reason);
}

void mark_spare(StoreClient& client, const std::string& run_id, std::int64_t seq) {
  client.set(pending_prefix(run_id) + std::to_string(seq) + "/spare", "1");
}

namespace {
namespace {
// Before joining: on a first round a node other than 0 waits (bounded) for node 0's leader key, so
// a store of another job is named at once; node 0 writes it; then the default-id check.
void announce_node(StoreClient& client, const StoreClientOptions& store,
                   const NodeRendezvousOptions& o) {
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
  if (!o.default_id_command.empty()) {
    if (auto warning = default_id_mismatch(client, store, o); warning && o.on_warning)
      o.on_warning(*warning);
  }
}

JoinRequest write_join(StoreClient& client, const std::string& prefix,
                       const NodeRendezvousOptions& o) {
  JoinRequest join;
  join.seq = client.add(prefix + "arrivals", 1);
  join.name = o.node_name;
  join.local_world_size = o.local_world_size;
  join.requested_node_rank = o.node_rank;
  join.settings = o.must_agree;
  join.previous_node_rank = o.previous_node_rank;
  client.set(prefix + "join/" + std::to_string(join.seq), encode_join(join));
  return join;
}

// Waits until the leader admits this node ("ok"); a refusal, a closed round, a lost leader or
// the deadline throws.
void await_admission(StoreClient& client, const std::string& prefix, const NodeRendezvousOptions& o,
                     const JoinRequest& join, bool leader, RdzvClock::time_point deadline) {
  // Tells a leader that failed the round that this node has read why (await_failure_read).
  auto acknowledge = [&] {
    try {
      client.set(prefix + "ack/" + std::to_string(join.seq), "1");
    } catch (const StoreError&) {
      // The leader's store is already gone; this node has its answer anyway.
    }
  };

  const std::string verdict_key = prefix + "verdict/" + std::to_string(join.seq);
  JoinProgressClock progress(o);
  LeaderWatch leader_watch(o, !leader);
  for (;;) {
    if (wait_for(client, verdict_key, kPollSlice)) break;
    if (leader_watch.stopped(client, prefix, RdzvClock::now()) && !client.check({verdict_key}) &&
        !client.check({prefix + "closed"})) {
      acknowledge();
      throw RoundMembersLostError(
          fmt::format("rendezvous '{}': {}", o.run_id, leader_watch.describe(client, prefix)));
    }
    progress.report(RdzvClock::now(), [&] {
      return client.check({prefix + "status"}) ? client.get(prefix + "status")
                                               : std::string("waiting for the round's leader");
    });
    if (client.check({prefix + "closed"}) && !client.check({verdict_key})) {
      std::string why = client.check({prefix + "status"}) ? client.get(prefix + "status") : "";
      acknowledge();
      if (o.may_wait_pending && client.check({prefix + "assignment"})) {
        throw ClosedBeforeAdmitted(
            fmt::format("rendezvous '{}' round {} closed", o.run_id, o.round));
      }
      if (client.check({prefix + "lost"})) {
        throw RoundMembersLostError(
            fmt::format("rendezvous '{}': {}", o.run_id, client.get(prefix + "lost")));
      }
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
}

RendezvousResult round_result(StoreClient& client, const NodeRendezvousOptions& o,
                              const std::string& counts_key, const Assignment& assignment,
                              std::int64_t seq) {
  RendezvousResult result;
  result.round = o.round;
  // Every node that was there before published before it joined; the round could not form
  // without them, so the record is there now if anyone had one.
  if (client.check({counts_key})) {
    const std::string counts = client.get(counts_key);
    if (std::sscanf(counts.c_str(), "%d|%d", &result.restarts_used, &result.rescales_used) != 2)
      result.restarts_used = result.rescales_used = -1;
  }
  result.assignment = assignment;
  result.num_nodes = static_cast<int>(assignment.nodes.size());
  result.world_size = assignment.world_size;
  for (const auto& n : assignment.nodes) {
    if (n.seq == seq) {
      result.node_rank = n.node_rank;
      result.base_rank = n.base_rank;
      result.local_world_size = n.local_world_size;
    }
  }
  return result;
}
}  // namespace

RendezvousResult join_once(const StoreClientOptions& store, const NodeRendezvousOptions& options) {
  NodeRendezvousOptions o = options;
  if (o.node_name.empty()) o.node_name = host_name();
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes) {
    throw RendezvousError(fmt::format("invalid node range {}:{}", o.min_nodes, o.max_nodes));
  }
  const auto deadline = RdzvClock::now() + o.join_timeout;
  const std::string prefix = key_prefix(o);
  StoreClient client(with_token(store, o.token));
  announce_node(client, store, o);
  const std::string counts_key = fmt::format("ddprun/{}/counts/{}", o.run_id, o.round);
  if (o.restarts_used >= 0 && o.rescales_used >= 0)
    client.set(counts_key, fmt::format("{}|{}", o.restarts_used, o.rescales_used));

  const JoinRequest join = write_join(client, prefix, o);
  const bool leader = o.node_rank >= 0 ? o.node_rank == 0 : join.seq == 1;
  std::optional<Assignment> assignment;
  if (leader) assignment = lead(client, prefix, o, describe_node(join), join.seq, deadline);
  await_admission(client, prefix, o, join, leader, deadline);
  if (!assignment) assignment = decode_assignment(client.get(prefix + "assignment"));
  if (!assignment) throw RendezvousError("rendezvous assignment record is malformed");
  return round_result(client, o, counts_key, *assignment, join.seq);
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

// A NodeMonitor's loop, one step per concern: this node's heartbeat and records, the others'
// progress, lost nodes, the job-wide view, pending nodes, the stop key. `beat` runs them once per
// heartbeat interval; all of it belongs to the monitor's thread.
class MonitorLoop {
 public:
  MonitorLoop(StoreClient& client, const std::string& prefix, std::string pending,
              const RendezvousResult& joined, const NodeMonitor::Options& options,
              const NodeMonitor::Callbacks& callbacks)
      : client_(client),
        prefix_(prefix),
        pending_(std::move(pending)),
        joined_(joined),
        nodes_(joined.assignment.nodes),
        options_(options),
        callbacks_(callbacks),
        watch_progress_(static_cast<bool>(callbacks.on_progress_elsewhere)),
        my_key_(prefix + "hb/" + std::to_string(joined.node_rank)),
        my_progress_key_(progress_key(prefix, joined.node_rank)),
        my_view_key_(view_key(prefix, joined.node_rank)),
        progress_seen_(nodes_.size()),
        view_exists_(nodes_.size(), 0) {
    keys_.reserve(2 * nodes_.size());  // heartbeat keys, then (if watched) progress keys
    for (const auto& n : nodes_) keys_.push_back(prefix + "hb/" + std::to_string(n.node_rank));
    // Job-wide progress: every node's progress key after the heartbeat keys, in one MULTI_GET.
    if (watch_progress_) {
      for (const auto& n : nodes_) keys_.push_back(progress_key(prefix, n.node_rank));
    }
  }

  // One heartbeat and one look at the round. Throws StoreError when the store does not answer.
  void beat(RdzvClock::time_point now) {
    publish_own();
    const auto values = client_.multi_get(keys_);
    if (watch_progress_) read_progress(values);
    const auto newly_lost = find_lost(values, now);
    auto report_lost = [&] {
      for (const auto& node : newly_lost) {
        if (callbacks_.on_node_lost) callbacks_.on_node_lost(node);
      }
    };
    try {
      if (callbacks_.on_views) read_views();  // reported before the losses they show
    } catch (const StoreError&) {
      report_lost();  // the loss found above is not forgotten with the store
      throw;
    }
    report_lost();
    if (callbacks_.on_pending) read_pending(now);
    read_stop();
    store_answered_ = RdzvClock::now();
  }

  // The store's host is gone: nobody can heartbeat any more, so this is reported once, after
  // heartbeat_timeout without an answer.
  void store_failed(const StoreError& error) {
    if (!store_lost_reported_ && RdzvClock::now() - store_answered_ > options_.heartbeat_timeout) {
      store_lost_reported_ = true;
      if (callbacks_.on_store_lost) callbacks_.on_store_lost(error.what());
    }
  }

 private:
  struct Seen {
    std::string value;
    RdzvClock::time_point changed;
    bool reported = false;
  };
  // A pending node: its last heartbeat value and when it changed; resolved ones (invited,
  // refused) are never looked at again.
  struct Pending {
    std::optional<JoinRequest> join;
    std::string beat;
    RdzvClock::time_point changed;
    bool moved = false;  // seen to change at least once: a record left by a dead node never does
    bool resolved = false;
  };

  void publish_own() {
    client_.add(my_key_, 1);
    if (callbacks_.local_progress) {
      const NodeProgress mine = callbacks_.local_progress();
      if (mine != published_progress_) {
        client_.set(my_progress_key_, encode_node_progress(mine));
        published_progress_ = mine;
      }
    }
    if (callbacks_.local_view) {
      std::string mine = callbacks_.local_view();
      if (mine.size() <= kMaxViewBytes && mine != published_view_) {
        client_.set(my_view_key_, mine);
        published_view_ = std::move(mine);
      }
    }
  }

  void read_progress(const std::vector<std::string>& values) {
    bool changed = false;
    bool others_started = true;
    std::optional<std::int64_t> best;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].node_rank == joined_.node_rank) continue;
      const auto p = decode_node_progress(values[nodes_.size() + i]);
      if (!p) continue;  // not ddprun's record: ignored
      if (!p->all_started) others_started = false;
      if (*p != progress_seen_[i]) {
        changed = true;
        progress_seen_[i] = *p;
      }
      if (p->best_step && (!best || *p->best_step > *best)) best = p->best_step;
    }
    if (changed) callbacks_.on_progress_elsewhere(best, others_started);
  }

  // The other nodes whose heartbeat has not moved for heartbeat_timeout, each reported once.
  std::vector<NodeAssignment> find_lost(const std::vector<std::string>& values,
                                        RdzvClock::time_point now) {
    std::vector<NodeAssignment> newly_lost;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const auto& node = nodes_[i];
      auto [it, fresh] = seen_.try_emplace(node.node_rank, Seen{values[i], now});
      if (fresh || it->second.value != values[i]) {
        it->second = Seen{values[i], now, false};
      } else if (!it->second.reported && node.node_rank != joined_.node_rank &&
                 now - it->second.changed > options_.heartbeat_timeout) {
        it->second.reported = true;
        newly_lost.push_back(node);
      }
    }
    return newly_lost;
  }

  // The job-wide view: this node's record as last published; the others' as last read. A round
  // formed by an older leader has no view keys until their nodes publish: each is CHECKed until
  // it exists (MULTI_GET would wait for it).
  void read_views() {
    std::vector<std::string> view_keys;
    std::vector<NodeView> views;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].node_rank == joined_.node_rank) continue;
      const std::string key = view_key(prefix_, nodes_[i].node_rank);
      if (!view_exists_[i]) view_exists_[i] = client_.check({key}) ? 1 : 0;
      if (view_exists_[i] == 1) view_keys.push_back(key);  // 2: too large, not read again
      views.push_back(
          NodeView{nodes_[i].node_rank, nodes_[i].name, {}, seen_[nodes_[i].node_rank].reported});
    }
    // Bounded: a record over kMaxViewBytes is not ddprun's (an agent never writes one); its
    // bytes are not transferred, and its key is not read again in this round.
    const auto records = view_keys.empty() ? StoreClient::BoundedValues{}
                                           : client_.multi_get_bounded(view_keys, kMaxViewBytes);
    std::size_t r = 0;
    for (std::size_t i = 0, v = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].node_rank == joined_.node_rank) continue;
      if (view_exists_[i] == 1 && r < records.values.size()) {
        const std::size_t at = r++;
        if (records.values[at]) {
          views[v].record = *records.values[at];
        } else if (records.too_large == at) {
          view_exists_[i] = 2;
          log_line(
              oversized_view_line(nodes_[i].node_rank, view_key(prefix_, nodes_[i].node_rank)));
        } else if (v < views_seen_.size()) {
          views[v].record = views_seen_[v].record;  // not read this time: as it was
        }
      }
      ++v;
    }
    const bool changed = !views_reported_ || views.size() != views_seen_.size() ||
                         !std::equal(views.begin(), views.end(), views_seen_.begin(),
                                     [](const NodeView& a, const NodeView& b) {
                                       return a.record == b.record && a.lost == b.lost;
                                     });
    if (changed) {
      views_reported_ = true;
      views_seen_ = views;
      callbacks_.on_views(views);
    }
  }

  // The live pending nodes, reported whenever their list changes.
  void read_pending(RdzvClock::time_point now) {
    const std::int64_t arrived = client_.add(pending_ + "next", 0);
    std::vector<JoinRequest> live;
    // The latest kMaxPending numbers only: a bounded scan, whatever the counter says.
    for (std::int64_t p = std::max<std::int64_t>(1, arrived - kMaxPending + 1); p <= arrived; ++p) {
      auto& entry = pendings_[p];
      if (entry.resolved) continue;
      const std::string own = pending_ + std::to_string(p);
      if (client_.check({own + "/invite"})) {
        entry.resolved = true;
        continue;
      }
      if (!entry.join) {
        if (!client_.check({own})) continue;  // its record is on the way
        entry.join = decode_join(client_.get(own));
        if (!entry.join) {
          entry.resolved = true;
          continue;
        }
        entry.join->seq = p;
      }
      const std::string beat = std::to_string(client_.add(own + "/hb", 0));
      if (entry.beat != beat) {
        entry.moved = !entry.beat.empty();
        entry.beat = beat;
        entry.changed = now;
      }
      if (entry.moved && now - entry.changed <= options_.heartbeat_timeout)
        live.push_back(*entry.join);
    }
    std::vector<std::int64_t> seqs;
    seqs.reserve(live.size());
    for (const auto& j : live) seqs.push_back(j.seq);
    if (seqs != reported_pending_) {
      reported_pending_ = seqs;
      callbacks_.on_pending(live);
    }
  }

  void read_stop() {
    if (!stop_reported_ && client_.check({prefix_ + "stop"})) {
      stop_reported_ = true;
      if (callbacks_.on_stop) callbacks_.on_stop(client_.get(prefix_ + "stop"));
    }
  }

  StoreClient& client_;
  const std::string& prefix_;
  const std::string pending_;
  const RendezvousResult& joined_;
  const std::vector<NodeAssignment>& nodes_;
  const NodeMonitor::Options& options_;
  const NodeMonitor::Callbacks& callbacks_;
  const bool watch_progress_;
  const std::string my_key_;
  const std::string my_progress_key_;
  const std::string my_view_key_;
  std::vector<std::string> keys_;
  NodeProgress published_progress_;
  std::optional<std::string> published_view_;
  std::vector<NodeProgress> progress_seen_;  // as the leader initialised them
  std::map<int, Seen> seen_;
  std::vector<char> view_exists_;
  std::vector<NodeView> views_seen_;
  bool views_reported_ = false;
  std::map<std::int64_t, Pending> pendings_;
  std::vector<std::int64_t> reported_pending_;  // the live list last reported
  bool stop_reported_ = false;
  bool store_lost_reported_ = false;
  RdzvClock::time_point store_answered_ = RdzvClock::now();
};
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
  MonitorLoop loop(client_, prefix_, pending_prefix(round_.run_id), joined_, options_, callbacks_);
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    const auto now = RdzvClock::now();
    try {
      loop.beat(now);
    } catch (const StoreError& e) {
      loop.store_failed(e);
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
  const std::int64_t count = client.add(prefix + "done", 1);
  if (count >= joined.num_nodes) client.compare_set(end_key, "", "done");
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
