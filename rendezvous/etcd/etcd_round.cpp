#include "rendezvous/etcd/etcd_round.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <nlohmann/json.hpp>

#include "rendezvous/token_auth.hpp"

namespace ddp::rdzv::etcd {
namespace {
using Json = nlohmann::json;
}

std::string encode_job_id(std::string_view run_id) {
  std::string out;
  out.reserve(run_id.size());
  for (const char c : run_id) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '%' || c == '/' || byte < 0x21 || byte > 0x7e)
      out += fmt::format("%{:02X}", byte);
    else
      out += c;
  }
  return out;
}

JobKeys::JobKeys(std::string prefix, const std::string& run_id, std::int64_t generation)
    : generation_(generation) {
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  id_root_ = fmt::format("{}/{}/", prefix, encode_job_id(run_id));
  // Generation 0 keeps the layout of jobs that never re-ran ("<id>/r0/...").
  root_ = generation == 0 ? id_root_ : fmt::format("{}g{}/", id_root_, generation);
}
std::string JobKeys::round(int round) const { return fmt::format("{}r{}/", root_, round); }
std::string JobKeys::record(int r) const { return round(r) + "record"; }
std::string JobKeys::alive(int r, std::int64_t lease) const {
  return fmt::format("{}{:x}", alive_prefix(r), lease);
}
std::string JobKeys::alive_prefix(int r) const { return round(r) + "alive/"; }
std::string JobKeys::store(int r) const { return round(r) + "store"; }
std::string JobKeys::stop(int r) const { return round(r) + "stop"; }
std::string JobKeys::done(int r, int node_rank) const {
  return fmt::format("{}{}", done_prefix(r), node_rank);
}
std::string JobKeys::done_prefix(int r) const { return round(r) + "done/"; }
std::string JobKeys::left(int r, int node_rank) const {
  return fmt::format("{}{}", left_prefix(r), node_rank);
}
std::string JobKeys::left_prefix(int r) const { return round(r) + "left/"; }
std::string JobKeys::progress(int r, int node_rank) const {
  return fmt::format("{}{}", progress_prefix(r), node_rank);
}
std::string JobKeys::progress_prefix(int r) const { return round(r) + "progress/"; }
std::string JobKeys::view(int r, int node_rank) const {
  return fmt::format("{}{}", view_prefix(r), node_rank);
}
std::string JobKeys::view_prefix(int r) const { return round(r) + "view/"; }
std::string JobKeys::pending_prefix() const { return root_ + "pending/"; }
std::string JobKeys::pending(std::int64_t lease) const {
  return fmt::format("{}{:x}", pending_prefix(), lease);
}
std::string JobKeys::pending_invite(std::int64_t lease) const { return pending(lease) + "/invite"; }
std::string JobKeys::pending_spare(std::int64_t lease) const { return pending(lease) + "/spare"; }

std::string encode_invitation(const Invitation& i) {
  return fmt::format("{}|{}|{}", i.round, i.nodes, i.node_rank);
}
std::string encode_refusal(std::string_view reason) { return fmt::format("refused: {}", reason); }

std::optional<PendingVerdict> decode_pending_verdict(std::string_view text) {
  constexpr std::string_view kRefused = "refused: ";
  PendingVerdict v;
  if (text.substr(0, kRefused.size()) == kRefused) {
    v.refused = std::string(text.substr(kRefused.size()));
    if (v.refused.empty()) v.refused = "no reason given";
    return v;
  }
  Invitation i;
  int* fields[] = {&i.round, &i.nodes, &i.node_rank};
  std::size_t at = 0;
  for (std::size_t f = 0; f < 3; ++f) {
    const std::size_t bar = f < 2 ? text.find('|', at) : text.size();
    if (bar == std::string_view::npos) return std::nullopt;
    auto [end, ec] = std::from_chars(text.data() + at, text.data() + bar, *fields[f]);
    if (ec != std::errc{} || end != text.data() + bar) return std::nullopt;
    at = bar + 1;
  }
  if (i.round < 0 || i.nodes < 0 || (i.nodes > 0 && (i.node_rank < 0 || i.node_rank >= i.nodes)))
    return std::nullopt;
  v.invitation = i;
  return v;
}

namespace {
// "<prefix><lease hex>[/<what>]" -> the lease and what follows it ("" for the request itself).
std::optional<std::pair<std::int64_t, std::string_view>> pending_key(std::string_view key,
                                                                     std::string_view prefix) {
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  key.remove_prefix(prefix.size());
  const std::size_t slash = key.find('/');
  const std::string_view hex = key.substr(0, slash);
  std::uint64_t lease = 0;
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), lease, 16);
  if (hex.empty() || ec != std::errc{} || end != hex.data() + hex.size() || lease == 0 ||
      lease > static_cast<std::uint64_t>(INT64_MAX))
    return std::nullopt;
  return std::pair{static_cast<std::int64_t>(lease),
                   slash == std::string_view::npos ? std::string_view{} : key.substr(slash + 1)};
}
}  // namespace

void PendingBoard::put(std::string_view key, std::string_view value, std::int64_t create_revision) {
  const auto parsed = pending_key(key, prefix_);
  if (!parsed) return;
  const auto payload = unseal(token_, key, value);
  if (!payload) return;  // a stranger's value
  const auto [lease, what] = *parsed;
  if (what.empty()) {
    auto join = decode_join(*payload);
    if (!join) return;
    join->seq = lease;
    if (!entries_.count(lease) && entries_.size() >= kMaxPending) {
      // Bounded: the oldest request goes (a flood of requests cannot grow the board).
      auto oldest = std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
        return a.second.since < b.second.since;
      });
      entries_.erase(oldest);
    }
    Entry& e = entries_[lease];
    e.request = std::move(join);
    e.since = create_revision;
  } else if (what == "invite") {
    if (auto it = entries_.find(lease); it != entries_.end()) {
      it->second.answered = true;
    } else if (entries_.size() < kMaxPending) {
      entries_[lease].answered = true;  // the answer came first in this feed: the request follows
    }
  }
}

void PendingBoard::erase(std::string_view key) {
  const auto parsed = pending_key(key, prefix_);
  if (parsed && parsed->second.empty()) entries_.erase(parsed->first);
}

void PendingBoard::clear() { entries_.clear(); }

std::vector<JoinRequest> PendingBoard::live() const {
  std::vector<std::pair<std::int64_t, JoinRequest>> out;
  for (const auto& [lease, e] : entries_) {
    if (e.request && !e.answered) out.emplace_back(e.since, *e.request);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<JoinRequest> live;
  live.reserve(out.size());
  for (auto& [since, join] : out) live.push_back(std::move(join));
  return live;
}

std::string encode_round(const RoundRecord& record) {
  Json members = Json::array();
  for (const auto& m : record.members) {
    members.push_back({{"lease", std::to_string(m.lease)},
                       {"name", m.name},
                       {"lws", m.local_world_size},
                       {"rank", m.asked_rank},
                       {"settings", m.settings}});
  }
  return Json{{"open", record.open},
              {"min", record.min_nodes},
              {"max", record.max_nodes},
              {"members", members},
              {"restarts_used", record.restarts_used},
              {"rescales_used", record.rescales_used}}
      .dump();
}

std::optional<RoundRecord> decode_round(std::string_view text) {
  try {
    const Json j = Json::parse(text);
    RoundRecord r;
    r.open = j.at("open").get<bool>();
    r.min_nodes = j.at("min").get<int>();
    r.max_nodes = j.at("max").get<int>();
    r.restarts_used = j.value("restarts_used", -1);
    r.rescales_used = j.value("rescales_used", -1);
    for (const auto& m : j.at("members")) {
      RoundMember one;
      one.lease = std::stoll(m.at("lease").get<std::string>());
      one.name = m.at("name").get<std::string>();
      one.local_world_size = m.at("lws").get<int>();
      one.asked_rank = m.at("rank").get<int>();
      one.settings = m.value("settings", std::string());
      if (one.local_world_size < 1) return std::nullopt;
      r.members.push_back(std::move(one));
    }
    if (r.min_nodes < 1 || r.max_nodes < r.min_nodes) return std::nullopt;
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

JoinStep join_step(const std::optional<RoundRecord>& current, const RoundMember& me,
                   const RoundShape& shape) {
  JoinStep step;
  RoundRecord next;
  if (current) {
    next = *current;
  } else {
    next.min_nodes = shape.min_nodes;
    next.max_nodes = shape.max_nodes;
  }
  for (const auto& m : next.members) {
    if (m.lease == me.lease) {
      step.kind = JoinStep::Kind::Joined;
      step.next = next;
      return step;
    }
  }
  if (!next.open) {
    step.kind = JoinStep::Kind::Closed;
    return step;
  }
  if (current && (current->min_nodes != shape.min_nodes || current->max_nodes != shape.max_nodes)) {
    step.kind = JoinStep::Kind::Refused;
    step.reason = fmt::format("the round expects {}:{} nodes, this node {}:{}", current->min_nodes,
                              current->max_nodes, shape.min_nodes, shape.max_nodes);
    return step;
  }
  for (const auto& m : next.members) {
    if (me.asked_rank >= 0 && m.asked_rank == me.asked_rank) {
      step.kind = JoinStep::Kind::Refused;
      step.reason = fmt::format("node rank {} is taken by {}", me.asked_rank, m.name);
      return step;
    }
    if (m.settings != me.settings) {
      step.kind = JoinStep::Kind::Refused;
      step.reason =
          fmt::format("its settings differ from {}'s: {} vs {}", m.name, me.settings, m.settings);
      return step;
    }
  }
  next.members.push_back(me);
  next.restarts_used = std::max(next.restarts_used, shape.restarts_used);
  next.rescales_used = std::max(next.rescales_used, shape.rescales_used);
  if (static_cast<int>(next.members.size()) >= next.max_nodes) {
    next.open = false;
    order_members(next);
  }
  step.next = std::move(next);
  return step;
}

std::optional<std::int64_t> lease_of_alive_key(std::string_view key, std::string_view prefix) {
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  const auto hex = key.substr(prefix.size());
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  if (hex.empty() || ec != std::errc{} || end != hex.data() + hex.size()) return std::nullopt;
  return static_cast<std::int64_t>(v);
}

AliveKeys alive_keys(const std::vector<KeyValue>& kvs, std::string_view alive_prefix) {
  AliveKeys alive;
  for (const auto& kv : kvs) {
    if (auto lease = lease_of_alive_key(kv.key, alive_prefix)) alive[*lease] = kv.mod_revision;
  }
  return alive;
}

JoinStep join_step(const std::optional<RoundRecord>& current, const RoundMember& me,
                   const RoundShape& shape, const AliveKeys& alive) {
  if (!current || !current->open) return join_step(current, me, shape);
  RoundRecord live = *current;
  std::vector<RoundMember> dropped;
  std::erase_if(live.members, [&](const RoundMember& m) {
    if (alive.count(m.lease)) return false;
    if (m.lease != me.lease) dropped.push_back(m);
    return true;  // `me` without its alive key joins again (the txn puts the key back)
  });
  if (live.members.empty()) {
    // Nobody alive ever joined it with this node: a never-formed round of dead members (a first
    // attempt that gave up, or was killed) is abandoned, so a re-run may ask another shape.
    live.min_nodes = shape.min_nodes;
    live.max_nodes = shape.max_nodes;
  }
  JoinStep step = join_step(live, me, shape);
  // Joined: `me` is listed and alive; a write is due only when dead members must go (a record
  // that lists a dead member must not fill up later around it).
  if (step.kind == JoinStep::Kind::Joined && !dropped.empty()) step.kind = JoinStep::Kind::Write;
  step.dropped = std::move(dropped);
  return step;
}

std::vector<Compare> liveness_compares(const JobKeys& keys, int round, const RoundRecord& next,
                                       const AliveKeys& alive, std::int64_t me) {
  std::vector<Compare> compares;
  for (const auto& m : next.members) {
    if (m.lease == me) continue;
    const auto it = alive.find(m.lease);
    compares.push_back(Compare{
        keys.alive(round, m.lease), Compare::Target::Mod, it == alive.end() ? -1 : it->second, {}});
  }
  return compares;
}

std::string round_status(const std::optional<RoundRecord>& current, const RoundShape& shape) {
  std::string arrived;
  std::set<int> asked;
  const std::size_t count = current ? current->members.size() : 0;
  if (current) {
    for (const auto& m : current->members) {
      arrived += fmt::format("{}{}", arrived.empty() ? "" : ", ", m.name);
      if (m.asked_rank >= 0) {
        arrived += fmt::format(" (node {})", m.asked_rank);
        asked.insert(m.asked_rank);
      }
    }
  }
  std::string line = fmt::format("{} of {} node(s) arrived: {}", count,
                                 shape.min_nodes == shape.max_nodes
                                     ? std::to_string(shape.max_nodes)
                                     : fmt::format("{}..{}", shape.min_nodes, shape.max_nodes),
                                 arrived.empty() ? "none" : arrived);
  if (!asked.empty()) {
    std::string missing;
    for (int r = 0; r < shape.max_nodes; ++r) {
      if (!asked.count(r)) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
    }
    if (!missing.empty()) line += fmt::format("; missing node rank(s): {}", missing);
  }
  return line;
}

bool generation_ended(const std::optional<RoundRecord>& round0, bool any_member_alive) {
  return round0 && !round0->open && !any_member_alive;
}

std::string encode_generation(std::int64_t generation) { return std::to_string(generation); }

std::optional<std::int64_t> decode_generation(std::string_view text) {
  std::int64_t g = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), g);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || g < 0)
    return std::nullopt;
  return g;
}

AliveGone why_alive_gone(bool left_marked, bool deleted_with_round_keys) {
  if (deleted_with_round_keys) return AliveGone::Deleted;
  if (left_marked) return AliveGone::Left;
  return AliveGone::Expired;
}

std::string alive_gone_text(int node_rank, std::string_view name, AliveGone why,
                            double heartbeat_timeout_s) {
  switch (why) {
    case AliveGone::Left:
      return fmt::format("lost node {} ({}): it left (its agent ended and gave up its etcd lease)",
                         node_rank, name);
    case AliveGone::Deleted:
      return fmt::format(
          "lost node {} ({}): its etcd keys were deleted with the round's (by someone else, e.g. "
          "`etcdctl del --prefix`), not by its lease",
          node_rank, name);
    case AliveGone::Expired:
      break;
  }
  return fmt::format(
      "lost node {} ({}): its etcd lease expired (no heartbeat for {:.3g} s, the lease's TTL)",
      node_rank, name, heartbeat_timeout_s);
}

BarrierVerdict barrier_verdict(const RoundRecord& closed, const std::set<int>& arrived,
                               const AliveKeys& alive) {
  BarrierVerdict v;
  const auto add = [](std::string& list, std::size_t rank, const RoundMember& m) {
    list += fmt::format("{}node {} ({})", list.empty() ? "" : ", ", rank, m.name);
  };
  for (std::size_t rank = 0; rank < closed.members.size(); ++rank) {
    const RoundMember& m = closed.members[rank];
    if (arrived.count(static_cast<int>(rank))) {
      add(v.arrived_text, rank, m);
    } else if (alive.count(m.lease)) {
      add(v.waiting, rank, m);
    } else {
      add(v.gone, rank, m);
      ++v.gone_count;
    }
  }
  v.all_arrived = v.gone.empty() && v.waiting.empty();
  if (v.arrived_text.empty()) v.arrived_text = "none";
  return v;
}

std::optional<ProgressPacer::Clock::duration> ProgressPacer::due(Clock::time_point now) {
  if (now < next_) return std::nullopt;
  next_ = now + interval_;
  return now - start_;
}

std::optional<RoundRecord> close_step(const RoundRecord& open, const std::set<std::int64_t>& alive,
                                      bool last_call_over) {
  if (!open.open) return std::nullopt;
  RoundRecord next = open;
  std::erase_if(next.members, [&](const RoundMember& m) { return !alive.count(m.lease); });
  const int n = static_cast<int>(next.members.size());
  // Static ranks need every rank; arrivals need min_nodes after the last call.
  const bool asked = std::any_of(next.members.begin(), next.members.end(),
                                 [](const RoundMember& m) { return m.asked_rank >= 0; });
  if (n >= next.max_nodes || (!asked && last_call_over && n >= next.min_nodes)) {
    next.open = false;
    order_members(next);
    return next;
  }
  return std::nullopt;
}

std::optional<std::string> lost_before_forming(const RoundRecord& previous,
                                               const RoundRecord& current,
                                               const std::set<std::int64_t>& alive, int min_nodes) {
  auto in_current = [&](std::int64_t lease) {
    return std::any_of(current.members.begin(), current.members.end(),
                       [&](const RoundMember& m) { return m.lease == lease; });
  };
  std::string lost;
  int lost_count = 0;
  int can_meet = static_cast<int>(current.members.size());
  for (std::size_t rank = 0; rank < previous.members.size(); ++rank) {
    const auto& m = previous.members[rank];
    if (in_current(m.lease)) continue;
    if (alive.count(m.lease)) {
      ++can_meet;
      continue;
    }
    lost += fmt::format("{}{} ({})", lost.empty() ? "" : ", ", rank, m.name);
    ++lost_count;
  }
  if (lost_count == 0 || can_meet >= min_nodes) return std::nullopt;
  return fmt::format(
      "lost node{} {} while the job met again: {} etcd lease{} ended; {} node{} can meet, fewer "
      "than the minimum of {}",
      lost_count == 1 ? "" : "s", lost, lost_count == 1 ? "its" : "their",
      lost_count == 1 ? "" : "s", can_meet, can_meet == 1 ? "" : "s", min_nodes);
}

void order_members(RoundRecord& record) {
  std::stable_sort(record.members.begin(), record.members.end(),
                   [](const RoundMember& a, const RoundMember& b) {
                     const bool a_asked = a.asked_rank >= 0;
                     const bool b_asked = b.asked_rank >= 0;
                     if (a_asked != b_asked) return a_asked;
                     return a_asked && a.asked_rank < b.asked_rank;
                   });
}

Assignment assignment_of(const RoundRecord& closed) {
  Assignment out;
  for (std::size_t i = 0; i < closed.members.size(); ++i) {
    const auto& m = closed.members[i];
    out.nodes.push_back(
        NodeAssignment{static_cast<int>(i), m.name, m.local_world_size, out.world_size, m.lease});
    out.world_size += m.local_world_size;
  }
  return out;
}

std::optional<int> node_rank_of(const RoundRecord& closed, std::int64_t lease) {
  for (std::size_t i = 0; i < closed.members.size(); ++i) {
    if (closed.members[i].lease == lease) return static_cast<int>(i);
  }
  return std::nullopt;
}

std::string seal(std::string_view token, std::string_view key, std::string_view payload) {
  if (token.empty()) return fmt::format("-|{}", payload);
  return fmt::format("{}|{}", hmac_sha256_hex(token, fmt::format("{}\n{}", key, payload)), payload);
}

std::optional<std::string> unseal(std::string_view token, std::string_view key,
                                  std::string_view value) {
  const auto bar = value.find('|');
  if (bar == std::string_view::npos) return std::nullopt;
  const std::string_view mac = value.substr(0, bar);
  const std::string_view payload = value.substr(bar + 1);
  if (token.empty()) {
    if (mac != "-") return std::nullopt;
    return std::string(payload);
  }
  if (!same_secret(mac, hmac_sha256_hex(token, fmt::format("{}\n{}", key, payload))))
    return std::nullopt;
  return std::string(payload);
}

}  // namespace ddp::rdzv::etcd
