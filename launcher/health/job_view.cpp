// SPDX-License-Identifier: MIT
#include "launcher/health/job_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

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

/// At most `bytes` bytes of the end of `text`, never starting inside a UTF-8 character.
std::string cut_front(std::string_view text, size_t bytes) {
  if (text.size() <= bytes) return std::string(text);
  size_t start = text.size() - bytes;
  while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  return std::string(text.substr(start));
}

/// Bytes of a record the ranks may take: the failures always have the rest.
constexpr size_t kMaxPublishedRanksBytes = 16384;

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
  if (r.cpu_percent) j["cpu"] = std::round(*r.cpu_percent * 10) / 10;
  if (r.rss_bytes) j["rss"] = *r.rss_bytes;
  if (r.stopped) j["stopped"] = true;
  return j;
}

/// A published CPU% or RSS as far as it can be a process's (absent otherwise).
std::optional<double> bounded_cpu(std::optional<double> cpu) {
  return cpu && *cpu >= 0 && *cpu <= kMaxPublishedCpuPercent ? cpu : std::nullopt;
}
std::optional<long long> bounded_rss(std::optional<long long> rss) {
  return rss && *rss >= 0 && *rss <= kMaxPublishedRssBytes ? rss : std::nullopt;
}

/// A failure cut to the record's bounds (when written and when read).
RankFailure bounded_failure(const RankFailure& f) {
  RankFailure b{f.attempt,
                f.rank,
                f.local_rank,
                cut(f.exit, kMaxPublishedText),
                cut(f.message, kMaxPublishedMessage),
                cut_front(f.traceback, kMaxPublishedTraceback),
                {}};
  b.node_rank = f.node_rank;
  b.root_cause = f.root_cause;
  b.cause_node = f.cause_node;
  b.cause_rank = f.cause_rank;
  b.cause = cut(f.cause, kMaxFailureCause);
  const size_t first = f.stderr_tail.size() > kMaxPublishedTailLines
                           ? f.stderr_tail.size() - kMaxPublishedTailLines
                           : 0;
  for (size_t i = first; i < f.stderr_tail.size(); ++i) {
    b.stderr_tail.push_back(cut(f.stderr_tail[i], kMaxPublishedTailLine));
  }
  return b;
}

json failure_json(const RankFailure& f) {
  json j{{"attempt", f.attempt},        {"rank", f.rank},
         {"local_rank", f.local_rank},  {"exit", f.exit},
         {"message", f.message},        {"traceback", f.traceback},
         {"stderr_tail", f.stderr_tail}};
  if (f.node_rank >= 0) j["node_rank"] = f.node_rank;
  j["root_cause"] = f.root_cause;
  j["caused_by"] = failure_cause_json(f);
  return j;
}

std::optional<RankFailure> decode_failure(const json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto rank = number<int>(j, "rank");
  const auto attempt = number<int>(j, "attempt");
  if (!rank || *rank < 0 || !attempt || *attempt < 0) return std::nullopt;
  RankFailure f;
  f.attempt = *attempt;
  f.rank = *rank;
  f.local_rank = number<int>(j, "local_rank").value_or(0);
  f.node_rank = std::max(-1, number<int>(j, "node_rank").value_or(-1));
  auto root = j.find("root_cause");
  f.root_cause = root != j.end() && root->is_boolean() && root->get<bool>();
  auto by = j.find("caused_by");
  if (!f.root_cause && by != j.end() && by->is_object()) {
    f.cause_node = std::max(-1, number<int>(*by, "node_rank").value_or(-1));
    f.cause_rank = std::max(-1, number<int>(*by, "rank").value_or(-1));
    f.cause = text(*by, "text", kMaxFailureCause);
  }
  // Read with the writer's bounds: the reader trusts no writer.
  f.exit = text(j, "exit", kMaxPublishedText);
  f.message = text(j, "message", kMaxPublishedMessage);
  auto tb = j.find("traceback");
  if (tb != j.end() && tb->is_string()) {
    f.traceback = cut_front(tb->get_ref<const std::string&>(), kMaxPublishedTraceback);
  }
  auto tail = j.find("stderr_tail");
  if (tail != j.end() && tail->is_array()) {
    for (const auto& line : *tail) {
      if (line.is_string()) f.stderr_tail.push_back(line.get<std::string>());
    }
  }
  return bounded_failure(f);
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
    bounded.cpu_percent = bounded_cpu(r.cpu_percent);
    bounded.rss_bytes = bounded_rss(r.rss_bytes);
    std::string one = dump_json(rank_json(bounded));
    if (ranks.size() >= kMaxPublishedRanks || size + one.size() + 1 > kMaxPublishedRanksBytes) {
      ++left_out;
      continue;
    }
    size += one.size() + 1;
    ranks.push_back(rank_json(bounded));
  }
  // The newest failures that fit; older ones (and those too large) are counted.
  size += 64;  // "failures":[],"failures_left_out":N
  std::vector<json> failures;
  long long failures_left_out = std::clamp(node.failures_left_out, 0LL, kMaxLeftOut);
  for (auto it = node.failures.rbegin(); it != node.failures.rend(); ++it) {
    json one = failure_json(bounded_failure(*it));
    const size_t bytes = dump_json(one).size() + 1;
    if (failures.size() >= kMaxPublishedFailures || size + bytes > kMaxPublishedBytes) {
      failures_left_out = std::min(failures_left_out + 1, kMaxLeftOut);
      continue;
    }
    size += bytes;
    failures.push_back(std::move(one));
  }
  json j{{"v", 1},
         {"host", cut(node.host, kMaxPublishedHost)},
         {"attempt", node.attempt},
         {"ranks", std::move(ranks)},
         {"ranks_left_out", left_out}};
  if (!failures.empty() || failures_left_out > 0) {
    j["failures"] = json(std::vector<json>(failures.rbegin(), failures.rend()));
    j["failures_left_out"] = failures_left_out;
  }
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
      p.cpu_percent = bounded_cpu(number<double>(r, "cpu"));
      p.rss_bytes = bounded_rss(number<long long>(r, "rss"));
      auto stopped = r.find("stopped");
      p.stopped = stopped != r.end() && stopped->is_boolean() && stopped->get<bool>();
      node.ranks.push_back(std::move(p));
    }
  }
  node.failures_left_out =
      std::clamp(number<long long>(j, "failures_left_out").value_or(0), 0LL, kMaxLeftOut);
  auto failures = j.find("failures");
  if (failures != j.end() && failures->is_array()) {
    // The last kMaxPublishedFailures well-formed ones (oldest first, as written).
    std::vector<RankFailure> read;
    for (const auto& f : *failures) {
      if (auto one = decode_failure(f)) read.push_back(std::move(*one));
    }
    const size_t skip =
        read.size() > kMaxPublishedFailures ? read.size() - kMaxPublishedFailures : 0;
    node.failures_left_out =
        std::min(node.failures_left_out + static_cast<long long>(skip), kMaxLeftOut);
    node.failures.assign(std::make_move_iterator(read.begin() + static_cast<long>(skip)),
                         std::make_move_iterator(read.end()));
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
      j["stopped_by_ddprun"] = r.stopped;
      // What a rank used is only news while it runs (a lost or stale node's numbers are old).
      const bool live = j["state"] == "running";
      j["cpu_percent"] = live && r.cpu_percent ? json(*r.cpu_percent) : json();
      j["rss_bytes"] = live && r.rss_bytes ? json(*r.rss_bytes) : json();
      out.push_back(std::move(j));
    }
  }
  return out;
}

json merge_job_failures(json local_failures, int node_rank, const std::string& host,
                        const std::vector<RemoteNodeView>& remote,
                        const std::map<int, AttemptCause>& decided) {
  std::vector<json> out;
  if (local_failures.is_array()) {
    for (auto& f : local_failures) {
      if (!f.contains("node_rank")) f["node_rank"] = node_rank;
      f["host"] = host;
      out.push_back(std::move(f));
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
    for (const auto& f : n->published->failures) {
      json j = failure_json(f);
      if (f.node_rank < 0) j["node_rank"] = n->node_rank;
      j["host"] = shown_host;
      j["remote"] = true;
      out.push_back(std::move(j));
    }
  }
  // This node's decision places every failure of its attempts, the other nodes' too.
  for (auto& f : out) {
    auto it = decided.find(f.value("attempt", -1));
    if (it == decided.end() || it->second.node_rank < 0) continue;
    const AttemptCause& c = it->second;
    const int where = f.value("node_rank", -1);
    const bool root = c.rank >= 0 ? where == c.node_rank && f.value("rank", -1) == c.rank
                                  : where == c.node_rank && f.value("root_cause", false);
    f["root_cause"] = root;
    if (root) {
      f["caused_by"] = nullptr;
    } else {
      f["caused_by"] = {{"node_rank", c.node_rank},
                        {"rank", c.rank >= 0 ? json(c.rank) : json()},
                        {"text", cut(c.text, kMaxFailureCause)}};
    }
  }
  // A consequence of another node's root cause names that node; its rank is in that node's
  // record (its root cause of the same attempt).
  for (auto& f : out) {
    auto by = f.find("caused_by");
    if (by == f.end() || !by->is_object() || !(*by)["rank"].is_null()) continue;
    const json& node = (*by)["node_rank"];
    if (!node.is_number_integer()) continue;
    for (const auto& root : out) {
      if (root.value("root_cause", false) && root.value("attempt", -1) == f.value("attempt", -2) &&
          root.value("node_rank", -1) == node.get<int>()) {
        (*by)["rank"] = root.value("rank", 0);
        break;
      }
    }
  }
  // By attempt; in each, the root cause first, then its consequences by node rank.
  std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return std::tuple(a.value("attempt", 0), !a.value("root_cause", false),
                      a.value("node_rank", 0)) < std::tuple(b.value("attempt", 0),
                                                            !b.value("root_cause", false),
                                                            b.value("node_rank", 0));
  });
  return json(std::move(out));
}

long long remote_failures_left_out(const std::vector<RemoteNodeView>& remote) {
  long long n = 0;
  for (const auto& r : remote) {
    if (r.published) n = std::min(n + r.published->failures_left_out, kMaxLeftOut);
  }
  return n;
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
