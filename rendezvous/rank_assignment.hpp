#pragma once

// The pure half of multi-node rendezvous: join records, the leader's admission state machine,
// the check that settings agree across nodes, and rank assignment. No I/O; node_rendezvous.cpp
// drives it over the store. (The token is proved per connection: token_auth.hpp.)

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddp::rdzv {

using RdzvClock = std::chrono::steady_clock;

// Settings every node of a job must share ("--max_restarts" -> "1"), in a fixed order.
using AgreedSettings = std::vector<std::pair<std::string, std::string>>;

// What an agent announces when it joins.
struct JoinRequest {
  std::int64_t seq = 0;          // arrival number handed out by the store (1, 2, ...)
  std::string name;              // host name (or any label) used in messages
  int local_world_size = 1;      // workers this node will run
  int requested_node_rank = -1;  // static rendezvous: the node's --node_rank; -1: assign on arrival
  AgreedSettings settings;       // what this node was started with, compared with the leader's
  int previous_node_rank = -1;   // a restart's join: this node's rank in the round before
};

struct NodeAssignment {
  int node_rank = 0;
  std::string name;
  int local_world_size = 1;
  int base_rank = 0;  // global rank of this node's local rank 0
  std::int64_t seq = 0;
};

struct Assignment {
  std::vector<NodeAssignment> nodes;  // in node-rank order
  int world_size = 0;
};

// Global ranks are contiguous per node in node-rank order (torchrun's rule). Static requests keep
// their node ranks; dynamic ones are numbered in arrival order.
Assignment assign_ranks(std::vector<JoinRequest> admitted);

std::string encode_join(const JoinRequest& join);
std::optional<JoinRequest> decode_join(std::string_view text);
std::string encode_assignment(const Assignment& assignment);
std::optional<Assignment> decode_assignment(std::string_view text);

// How messages name a node: "node 1 (host-b)" (static) or "host-b (arrival #2)"; host names
// alone may all be the same.
std::string describe_node(const JoinRequest& join);

// nullopt when `joiner` has the leader's settings; else one line naming the first setting that
// differs, both values and both nodes. A setting one side lacks counts as "(not set)".
std::optional<std::string> settings_mismatch(const AgreedSettings& leader,
                                             std::string_view leader_name,
                                             const AgreedSettings& joiner,
                                             std::string_view joiner_name);

struct AdmissionPolicy {
  int min_nodes = 1;
  int max_nodes = 1;
  bool static_ranks = true;  // node ranks come from the joins (0..max_nodes-1, each once)
  AgreedSettings settings;   // the leader's own
  std::string leader_name;
  std::string run_id;
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::vector<std::string>
      excluded_hosts{};  // joins from these names are refused (--exclude-hosts)
};

// The refusal of a join from an excluded host (--exclude-hosts), or nullopt when `name` is not.
std::optional<std::string> exclusion(const std::vector<std::string>& excluded_hosts,
                                     std::string_view name);

// The leader's decision procedure, fed one join at a time.
class Admission {
 public:
  explicit Admission(AdmissionPolicy policy) : policy_(std::move(policy)) {}

  struct Decision {
    bool admitted = false;
    std::string reason;  // why a join was refused
    bool fatal = false;  // the job cannot form at all (settings differ): every node must end
  };
  Decision offer(const JoinRequest& join, RdzvClock::time_point now);

  // Complete when max_nodes joined, or (dynamic) min_nodes joined and last_call_timeout passed.
  bool complete(RdzvClock::time_point now) const;
  // When complete() may next turn true without a new join (the end of the last call), if ever.
  std::optional<RdzvClock::time_point> last_call_deadline() const;

  const std::vector<JoinRequest>& admitted() const { return admitted_; }
  // One line naming who arrived and, for static rendezvous, which node ranks are missing.
  std::string describe() const;

 private:
  AdmissionPolicy policy_;
  std::vector<JoinRequest> admitted_;
  std::optional<RdzvClock::time_point> min_reached_at_;
};

}  // namespace ddp::rdzv
