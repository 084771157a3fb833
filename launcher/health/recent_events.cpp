// SPDX-License-Identifier: MIT
#include "launcher/health/recent_events.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ddp::launcher::health {

namespace {

constexpr size_t kMaxString = 240;
constexpr size_t kMaxOthers = 64;  // lost/excluded/spare/pending nodes remembered

// Fields that are too big for a ring or must never be shown (the workers' command line and
// environment may carry secrets; a token is never shown).
bool dropped_field(const std::string& key) {
  return key == "argv" || key == "env" || key == "attempts" ||
         key.find("token") != std::string::npos;
}

nlohmann::json compact_value(const nlohmann::json& v, int depth) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s.size() <= kMaxString) return v;
    return s.substr(0, kMaxString) + "…";
  }
  if (v.is_array()) {
    if (depth > 1) return static_cast<long long>(v.size());
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < v.size() && i < 16; ++i) out.push_back(compact_value(v[i], depth + 1));
    return out;
  }
  if (v.is_object()) {
    if (depth > 1) return nlohmann::json::object();
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, x] : v.items()) {
      if (!dropped_field(k)) out[k] = compact_value(x, depth + 1);
    }
    return out;
  }
  return v;
}

int int_field(const nlohmann::json& e, const char* key, int fallback) {
  auto it = e.find(key);
  return it != e.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

std::string string_field(const nlohmann::json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// The failure summary's root cause from a summary event's last attempt: its failed rank, how it
/// ended and its error message's first line ("" when that attempt has no failed rank).
std::string local_root_cause(const nlohmann::json& summary) {
  auto attempts = summary.find("attempts");
  if (attempts == summary.end() || !attempts->is_array() || attempts->empty()) return {};
  const auto& a = attempts->back();
  if (!a.is_object()) return {};
  const int rank = int_field(a, "root_cause_rank", -1);
  auto workers = a.find("workers");
  if (rank < 0 || workers == a.end() || !workers->is_array()) return {};
  for (const auto& w : *workers) {
    if (!w.is_object() || int_field(w, "rank", -1) != rank) continue;
    std::string out = fmt::format("rank {} (local rank {}, attempt {}) ", rank,
                                  int_field(w, "local_rank", -1), int_field(a, "attempt", 0));
    const int code = int_field(w, "exit_code", -1);
    out += code >= 0 ? fmt::format("exited with code {}", code)
                     : "was killed by " + string_field(w, "signal");
    auto oom = w.find("oom_killed");
    if (oom != w.end() && oom->is_boolean() && oom->get<bool>()) out += " (out of memory)";
    const std::string message = string_field(w, "error_message");
    if (!message.empty()) out += ": " + message.substr(0, message.find('\n'));
    return out;
  }
  return {};
}

}  // namespace

nlohmann::json RecentEvents::compact(const nlohmann::json& event) {
  return compact_value(event, 0);
}

void RecentEvents::add(const nlohmann::json& event) {
  if (!event.is_object()) return;
  apply(event);
  nlohmann::json kept = compact(event);
  kept["seq"] = ++seq_;
  ring_.push_back(std::move(kept));
  while (ring_.size() > capacity_) {
    ring_.pop_front();
    ++dropped_;
  }
}

void RecentEvents::note_gone(Node node) {
  node.node_rank = -1;
  others_.push_back(std::move(node));
  if (others_.size() > kMaxOthers) others_.erase(others_.begin());
}

void RecentEvents::apply(const nlohmann::json& e) {
  const std::string kind = string_field(e, "event");
  if (kind == "launch") {
    run_id_ = string_field(e, "run_id");
    world_size_ = int_field(e, "world_size", world_size_);
    node_rank_ = int_field(e, "node_rank", node_rank_);
    num_nodes_ = int_field(e, "nnodes", num_nodes_);
  } else if (kind == "rendezvous") {
    attempt_ = int_field(e, "attempt", attempt_);
    world_size_ = int_field(e, "world_size", world_size_);
    node_rank_ = int_field(e, "node_rank", node_rank_);
    num_nodes_ = int_field(e, "num_nodes", num_nodes_);
    // Nodes of the last round marked lost stay in the list as lost.
    for (auto& n : round_) {
      if (n.state == "lost") note_gone(n);
    }
    round_.clear();
    if (auto it = e.find("nodes"); it != e.end() && it->is_array()) {
      for (const auto& n : *it) {
        round_.push_back(Node{string_field(n, "name"), int_field(n, "node_rank", -1),
                              int_field(n, "local_world_size", 0), int_field(n, "base_rank", 0),
                              "running", ""});
      }
    }
    state_ = "starting";
  } else if (kind == "worker_start") {
    attempt_ = int_field(e, "attempt", attempt_);
    state_ = "running";
  } else if (kind == "restart") {
    state_ = "restarting";
  } else if (kind == "node_lost") {
    const int lost = int_field(e, "node_rank", -1);
    for (auto& n : round_) {
      if (n.node_rank == lost) {
        n.state = "lost";
        n.detail = string_field(e, "message");
      }
    }
    if (lost < 0) state_ = "stopping";
  } else if (kind == "rescale") {
    state_ = "re-forming";
    // A spare or pending node that came in is no longer waiting.
    const std::string change = string_field(e, "change");
    for (auto it = others_.begin(); it != others_.end(); ++it) {
      if ((change == "spare" && it->state == "spare") ||
          (change == "admit" && it->state == "pending")) {
        others_.erase(it);
        break;
      }
    }
  } else if (kind == "spare" || kind == "pending") {
    std::string who = string_field(e, "node");
    if (who.empty()) who = string_field(e, "host");
    note_gone(Node{who, -1, 0, 0, kind, ""});
  } else if (kind == "excluded") {
    const int rank = int_field(e, "node_rank", -1);
    std::string who = string_field(e, "host");
    for (auto it = round_.begin(); it != round_.end(); ++it) {
      if (rank >= 0 && it->node_rank == rank) {
        who = it->name;
        break;
      }
    }
    note_gone(Node{who, -1, 0, 0, "excluded", string_field(e, "reason")});
  } else if (kind == "hang") {
    state_ = "hung";
  } else if (kind == "job_stop") {
    state_ = "stopping";
  } else if (kind == "summary") {
    exit_code_ = int_field(e, "exit_code", -1);
    state_ = exit_code_ == 0 ? "succeeded" : "failed";
    // The whole job's cause (several nodes), else this node's: what the failure summary says.
    root_cause_ = string_field(e, "job_root_cause");
    if (root_cause_.empty() && exit_code_ != 0) root_cause_ = local_root_cause(e);
  }
}

nlohmann::json RecentEvents::events_json() const {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : ring_) events.push_back(e);
  return {{"events", events}, {"dropped", dropped_}};
}

nlohmann::json RecentEvents::job_json() const {
  nlohmann::json nodes = nlohmann::json::array();
  auto put = [&](const Node& n) {
    nlohmann::json j{{"name", n.name}, {"state", n.state}};
    j["node_rank"] = n.node_rank >= 0 ? nlohmann::json(n.node_rank) : nlohmann::json();
    if (n.node_rank >= 0) {
      j["local_world_size"] = n.local_world_size;
      j["base_rank"] = n.base_rank;
    }
    if (!n.detail.empty()) j["detail"] = compact_value(n.detail, 0);
    nodes.push_back(std::move(j));
  };
  for (const auto& n : round_) put(n);
  for (const auto& n : others_) put(n);
  nlohmann::json j{{"run_id", run_id_},       {"state", state_},
                   {"attempt", attempt_},     {"world_size", world_size_},
                   {"node_rank", node_rank_}, {"num_nodes", num_nodes_},
                   {"nodes", nodes}};
  j["exit_code"] = exit_code_ >= 0 ? nlohmann::json(exit_code_) : nlohmann::json();
  if (!root_cause_.empty()) j["root_cause"] = compact_value(root_cause_, 0);
  return j;
}

}  // namespace ddp::launcher::health
