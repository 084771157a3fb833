// SPDX-License-Identifier: MIT
#pragma once
/// RecentEvents: what /status says about the job's history, kept from the --events lines as they
/// are emitted (whether or not an events file is written). Pure and bounded:
///   - a ring of the last `capacity` events, each compacted (no argv or environment, strings
///     cut, no field naming a token), numbered by `seq` so that a poller can tell new from seen;
///   - a digest: the job (run id, state, attempt, world size, this node's rank) and its nodes
///     with their state (running, lost, spare, pending, excluded), as the events told them.
/// The dashboard and `ddprun top` draw the timeline and the node list from these
/// (docs/health.md, "Seeing a job").

#include <cstddef>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ddp::launcher::health {

class RecentEvents {
 public:
  explicit RecentEvents(size_t capacity = 256) : capacity_(capacity) {}

  /// One event as EventLog writes it ("event" and "time" included).
  void add(const nlohmann::json& event);

  /// {"events": [...oldest first...], "dropped": N} — the ring.
  nlohmann::json events_json() const;
  /// {"run_id", "state", "attempt", "world_size", "node_rank", "num_nodes", "nodes": [...]}.
  nlohmann::json job_json() const;
  size_t size() const { return ring_.size(); }

  /// The compact form kept in the ring (public for tests).
  static nlohmann::json compact(const nlohmann::json& event);

 private:
  struct Node {
    std::string name;
    int node_rank = -1;  // in the current round; -1 when not in it
    int local_world_size = 0;
    int base_rank = 0;
    std::string state;   // running, lost, spare, pending, excluded
    std::string detail;  // why (lost: the message)
  };
  void apply(const nlohmann::json& event);
  void note_gone(Node node);

  size_t capacity_;
  std::deque<nlohmann::json> ring_;
  long long seq_ = 0;
  long long dropped_ = 0;
  // The digest.
  std::string run_id_;
  std::string state_ = "starting";
  int attempt_ = 0;
  int world_size_ = 0;
  int node_rank_ = 0;
  int num_nodes_ = 1;
  int exit_code_ = -1;
  std::string root_cause_;
  std::vector<Node> round_;   // the current round's nodes, by node rank
  std::vector<Node> others_;  // lost, excluded, spare and pending nodes (bounded)
};

}  // namespace ddp::launcher::health
