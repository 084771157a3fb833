// SPDX-License-Identifier: MIT
#include "launcher/health/job_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "rendezvous/json_text.hpp"

namespace ddp::launcher::health {
namespace {

using nlohmann::json;

/// At most `bytes` bytes, never ending inside a UTF-8 character (a cut one would read as U+FFFD).
std::string cut(std::string_view text, size_t bytes) {
  if (text.size() <= bytes) return std::string(text);
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end));
}

/// Counts that add up: a record's ranks_left_out is someone else's number.
constexpr long long kMaxLeftOut = 1LL << 40;

template <typename T>
std::optional<T> number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    const double v = it->get<double>();
    if (!std::isfinite(v)) return std::nullopt;
    return v;
  } else {
    // Out of T's range is a wrong value, not a smaller one (rank 2^32 + 2 is not rank 2).
    if (it->is_number_float()) return std::nullopt;
    if (it->is_number_unsigned()) {
      const auto v = it->get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
      return static_cast<T>(v);
    }
    const auto v = it->get<std::int64_t>();
    if (v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        v > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
      return std::nullopt;
    }
    return static_cast<T>(v);
  }
}

std::string text(const json& j, const char* key, size_t bytes) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? cut(it->get_ref<const std::string&>(), bytes)
                                          : std::string();
}

json rank_json(const PublishedRank& r) {
  json j{{"rank", r.rank}, {"local_rank", r.local_rank}, {"pid", r.pid}, {"state", r.state}};
  j["step"] = r.step ? json(*r.step) : json();
  // Tenths of a second: the view needs no more, and the record stays small.
  j["age_s"] = r.age_s ? json(std::round(*r.age_s * 10) / 10) : json();
  j["exit"] = r.exit.empty() ? json() : json(r.exit);
  return j;
}

}  // namespace

std::string encode_published_node(const PublishedNode& node) {
  json ranks = json::array();
  long long left_out = node.ranks_left_out;
  size_t size = 64 + std::min(node.host.size(), kMaxPublishedHost) * 6;  // \u escapes at worst
  for (const auto& r : node.ranks) {
    PublishedRank bounded = r;
    bounded.state = cut(r.state, kMaxPublishedText);
    bounded.exit = cut(r.exit, kMaxPublishedText);
    std::string one = dump_json(rank_json(bounded));
    if (ranks.size() >= kMaxPublishedRanks || size + one.size() + 1 > kMaxPublishedBytes) {
      ++left_out;
      continue;
    }
    size += one.size() + 1;
    ranks.push_back(rank_json(bounded));
  }
  json j{{"v", 1},
         {"host", cut(node.host, kMaxPublishedHost)},
         {"attempt", node.attempt},
         {"ranks", std::move(ranks)},
         {"ranks_left_out", left_out}};
  return dump_json(j);
}

std::optional<PublishedNode> decode_published_node(std::string_view text_in) {
  if (text_in.empty() || text_in.size() > kMaxPublishedBytes) return std::nullopt;
  const json j = json::parse(text_in, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  PublishedNode node;
  node.host = text(j, "host", kMaxPublishedHost);
  node.attempt = number<int>(j, "attempt").value_or(0);
  node.ranks_left_out =
      std::clamp(number<long long>(j, "ranks_left_out").value_or(0), 0LL, kMaxLeftOut);
  auto ranks = j.find("ranks");
  std::set<int> seen;
  if (ranks != j.end() && ranks->is_array()) {
    for (const auto& r : *ranks) {
      if (!r.is_object()) continue;
      const auto rank = number<int>(r, "rank");
      if (!rank || *rank < 0) continue;          // a row that names no rank says nothing
      if (!seen.insert(*rank).second) continue;  // a rank twice: the first row stands
      if (node.ranks.size() >= kMaxPublishedRanks) {
        node.ranks_left_out = std::min(node.ranks_left_out + 1, kMaxLeftOut);
        continue;
      }
      PublishedRank p;
      p.rank = *rank;
      p.local_rank = number<int>(r, "local_rank").value_or(0);
      p.pid = number<long long>(r, "pid").value_or(0);
      p.state = text(r, "state", kMaxPublishedText);
      p.step = number<long long>(r, "step");
      p.age_s = number<double>(r, "age_s");
      if (p.age_s && *p.age_s < 0) p.age_s.reset();
      p.exit = text(r, "exit", kMaxPublishedText);
      node.ranks.push_back(std::move(p));
    }
  }
  return node;
}

std::string shown_remote_state(const std::string& published, bool node_lost, double record_age_s,
                               JobEnd end) {
  if (published != "running") return published;
  if (node_lost) return "lost";
  // A record stops changing when its node, or this node's reading, stops: "running" would then
  // be a guess. After a success every rank exited 0 (the exit barrier counted them).
  if (end == JobEnd::Succeeded) return "exited";
  if (end == JobEnd::Failed || record_age_s > kStaleRecordS) return "unknown";
  return published;
}

json merge_job_ranks(json local_ranks, int node_rank, const std::string& host,
                     const std::vector<RemoteNodeView>& remote, JobEnd end) {
  json out = json::array();
  if (local_ranks.is_array()) {
    for (auto& r : local_ranks) {
      r["node_rank"] = node_rank;
      r["host"] = host;
      out.push_back(std::move(r));
    }
  }
  std::vector<const RemoteNodeView*> nodes;
  for (const auto& n : remote) {
    if (n.node_rank != node_rank && n.published) nodes.push_back(&n);
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const auto* a, const auto* b) { return a->node_rank < b->node_rank; });
  std::set<int> listed;  // a rank another node claims too is shown once, as its first node says
  for (const auto& r : out) listed.insert(r.value("rank", -1));
  for (const auto* n : nodes) {
    const std::string& shown_host = n->published->host.empty() ? n->name : n->published->host;
    for (const auto& r : n->published->ranks) {
      if (!listed.insert(r.rank).second) continue;
      json j{{"rank", r.rank},
             {"local_rank", r.local_rank},
             {"node_rank", n->node_rank},
             {"host", shown_host},
             {"pid", r.pid},
             {"state", shown_remote_state(r.state, n->lost, n->received_age_s, end)},
             {"straggler", false},
             {"remote", true}};
      j["last_step"] = r.step ? json(*r.step) : json();
      j["last_progress_age_s"] =
          r.age_s ? json(*r.age_s + std::max(0.0, n->received_age_s)) : json();
      j["exit"] = r.exit.empty() ? json() : json(r.exit);
      out.push_back(std::move(j));
    }
  }
  return out;
}

json job_nodes_json(int node_rank, const std::string& host, size_t local_ranks,
                    const std::vector<RemoteNodeView>& remote) {
  json out = json::array();
  out.push_back(
      {{"node_rank", node_rank}, {"host", host}, {"state", "up"}, {"ranks", local_ranks}});
  std::vector<const RemoteNodeView*> nodes;
  for (const auto& n : remote) {
    if (n.node_rank != node_rank) nodes.push_back(&n);
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const auto* a, const auto* b) { return a->node_rank < b->node_rank; });
  for (const auto* n : nodes) {
    json j{{"node_rank", n->node_rank},
           {"host", n->published && !n->published->host.empty() ? n->published->host : n->name},
           {"state", n->lost                                             ? "lost"
                     : n->published && n->received_age_s > kStaleRecordS ? "unknown"
                                                                         : "up"}};
    j["ranks"] = n->published ? json(n->published->ranks.size()) : json();
    j["ranks_left_out"] = n->published ? json(n->published->ranks_left_out) : json();
    j["record_age_s"] = n->published ? json(std::max(0.0, n->received_age_s)) : json();
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ddp::launcher::health
