// SPDX-License-Identifier: MIT
#include "launcher/health/job_view.hpp"

#include <algorithm>
#include <cmath>

#include "rendezvous/json_text.hpp"

namespace ddp::launcher::health {
namespace {

using nlohmann::json;

std::string cut(std::string_view text, size_t bytes) {
  return std::string(text.substr(0, std::min(text.size(), bytes)));
}

template <typename T>
std::optional<T> number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    const double v = it->get<double>();
    if (!std::isfinite(v)) return std::nullopt;
    return v;
  } else {
    if (it->is_number_float()) return std::nullopt;
    return it->get<T>();
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
  node.ranks_left_out = std::max(0LL, number<long long>(j, "ranks_left_out").value_or(0));
  auto ranks = j.find("ranks");
  if (ranks != j.end() && ranks->is_array()) {
    for (const auto& r : *ranks) {
      if (!r.is_object()) continue;
      const auto rank = number<int>(r, "rank");
      if (!rank || *rank < 0) continue;  // a row that names no rank says nothing
      if (node.ranks.size() >= kMaxPublishedRanks) {
        ++node.ranks_left_out;
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

json merge_job_ranks(json local_ranks, int node_rank, const std::string& host,
                     const std::vector<RemoteNodeView>& remote) {
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
  for (const auto* n : nodes) {
    const std::string& shown_host = n->published->host.empty() ? n->name : n->published->host;
    for (const auto& r : n->published->ranks) {
      json j{{"rank", r.rank},
             {"local_rank", r.local_rank},
             {"node_rank", n->node_rank},
             {"host", shown_host},
             {"pid", r.pid},
             {"state", n->lost && r.state == "running" ? std::string("lost") : r.state},
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
           {"state", n->lost ? "lost" : "up"}};
    j["ranks"] = n->published ? json(n->published->ranks.size()) : json();
    j["ranks_left_out"] = n->published ? json(n->published->ranks_left_out) : json();
    j["record_age_s"] = n->published ? json(std::max(0.0, n->received_age_s)) : json();
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ddp::launcher::health
