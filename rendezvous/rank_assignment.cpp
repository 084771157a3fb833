#include "rendezvous/rank_assignment.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/json_text.hpp"

namespace ddp::rdzv {
namespace {

using Json = nlohmann::json;

std::string setting_value(const AgreedSettings& settings, const std::string& name) {
  for (const auto& [key, value] : settings) {
    if (key == name) return value;
  }
  return "(not set)";
}

}  // namespace

Assignment assign_ranks(std::vector<JoinRequest> admitted) {
  const bool by_request = !admitted.empty() && admitted.front().requested_node_rank >= 0;
  std::stable_sort(
      admitted.begin(), admitted.end(), [&](const JoinRequest& a, const JoinRequest& b) {
        return by_request ? a.requested_node_rank < b.requested_node_rank : a.seq < b.seq;
      });
  Assignment out;
  for (std::size_t i = 0; i < admitted.size(); ++i) {
    const JoinRequest& j = admitted[i];
    out.nodes.push_back(
        NodeAssignment{static_cast<int>(i), j.name, j.local_world_size, out.world_size, j.seq});
    out.world_size += j.local_world_size;
  }
  return out;
}

std::string encode_join(const JoinRequest& join) {
  return dump_json(Json{{"seq", join.seq},
                        {"name", join.name},
                        {"local_world_size", join.local_world_size},
                        {"node_rank", join.requested_node_rank},
                        {"settings", join.settings},
                        {"previous_node_rank", join.previous_node_rank}});
}

std::optional<JoinRequest> decode_join(std::string_view text) {
  try {
    const Json j = Json::parse(text);
    JoinRequest out;
    out.seq = j.at("seq").get<std::int64_t>();
    out.name = j.at("name").get<std::string>();
    out.local_world_size = j.at("local_world_size").get<int>();
    out.requested_node_rank = j.at("node_rank").get<int>();
    out.settings = j.at("settings").get<AgreedSettings>();
    out.previous_node_rank = j.value("previous_node_rank", -1);
    return out;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

std::string encode_assignment(const Assignment& assignment) {
  Json nodes = Json::array();
  for (const auto& n : assignment.nodes) {
    nodes.push_back({{"node_rank", n.node_rank},
                     {"name", n.name},
                     {"local_world_size", n.local_world_size},
                     {"base_rank", n.base_rank},
                     {"seq", n.seq}});
  }
  return dump_json(Json{{"world_size", assignment.world_size}, {"nodes", nodes}});
}

std::optional<Assignment> decode_assignment(std::string_view text) {
  try {
    const Json j = Json::parse(text);
    Assignment out;
    out.world_size = j.at("world_size").get<int>();
    for (const auto& n : j.at("nodes")) {
      out.nodes.push_back(
          NodeAssignment{n.at("node_rank").get<int>(), n.at("name").get<std::string>(),
                         n.at("local_world_size").get<int>(), n.at("base_rank").get<int>(),
                         n.at("seq").get<std::int64_t>()});
    }
    return out;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

std::string describe_node(const JoinRequest& join) {
  if (join.requested_node_rank >= 0)
    return fmt::format("node {} ({})", join.requested_node_rank, join.name);
  return fmt::format("{} (arrival #{})", join.name, join.seq);
}

std::optional<std::string> settings_mismatch(const AgreedSettings& leader,
                                             std::string_view leader_name,
                                             const AgreedSettings& joiner,
                                             std::string_view joiner_name) {
  auto differ = [&](const std::string& name, const std::string& ours, const std::string& theirs) {
    return fmt::format("{} differs between nodes: {} on {} but {} on {}", name, ours, leader_name,
                       theirs, joiner_name);
  };
  for (const auto& [name, value] : leader) {
    const std::string theirs = setting_value(joiner, name);
    if (theirs != value) return differ(name, value, theirs);
  }
  for (const auto& [name, value] : joiner) {
    if (setting_value(leader, name) == "(not set)") return differ(name, "(not set)", value);
  }
  return std::nullopt;
}

std::optional<std::string> exclusion(const std::vector<std::string>& excluded_hosts,
                                     std::string_view name) {
  for (const auto& host : excluded_hosts) {
    if (host == name)
      return fmt::format("host '{}' is excluded from this job (--exclude-hosts)", name);
  }
  return std::nullopt;
}

Admission::Decision Admission::offer(const JoinRequest& join, RdzvClock::time_point now) {
  if (auto excluded = exclusion(policy_.excluded_hosts, join.name)) return {false, *excluded};
  if (auto mismatch = settings_mismatch(policy_.settings, policy_.leader_name, join.settings,
                                        describe_node(join))) {
    return {false, *mismatch, true};
  }
  if (static_cast<int>(admitted_.size()) >= policy_.max_nodes) {
    return {false, fmt::format("the job already has its {} nodes", policy_.max_nodes)};
  }
  if (join.local_world_size < 1) return {false, "local world size must be at least 1"};
  if (policy_.static_ranks) {
    const int r = join.requested_node_rank;
    if (r < 0 || r >= policy_.max_nodes) {
      return {false, fmt::format("node rank {} is outside 0..{}", r, policy_.max_nodes - 1)};
    }
    for (const auto& a : admitted_) {
      if (a.requested_node_rank == r)
        return {false, fmt::format("node rank {} already joined from {}", r, a.name)};
    }
  } else if (join.requested_node_rank >= 0) {
    return {false, "a fixed node rank was given to a rendezvous that assigns ranks on arrival"};
  }
  admitted_.push_back(join);
  if (!min_reached_at_ && static_cast<int>(admitted_.size()) >= policy_.min_nodes)
    min_reached_at_ = now;
  return {true, {}};
}

bool Admission::complete(RdzvClock::time_point now) const {
  const int n = static_cast<int>(admitted_.size());
  if (n >= policy_.max_nodes) return true;
  if (policy_.static_ranks || !min_reached_at_) return false;
  return now >= *min_reached_at_ + policy_.last_call_timeout;
}

std::optional<RdzvClock::time_point> Admission::last_call_deadline() const {
  if (policy_.static_ranks || !min_reached_at_) return std::nullopt;
  return *min_reached_at_ + policy_.last_call_timeout;
}

std::string Admission::describe() const {
  std::string arrived;
  for (const auto& a : admitted_) {
    arrived += fmt::format("{}{}", arrived.empty() ? "" : ", ", a.name);
    if (a.requested_node_rank >= 0) arrived += fmt::format(" (node {})", a.requested_node_rank);
  }
  std::string line = fmt::format("{} of {} node(s) arrived: {}", admitted_.size(),
                                 policy_.min_nodes == policy_.max_nodes
                                     ? std::to_string(policy_.max_nodes)
                                     : fmt::format("{}..{}", policy_.min_nodes, policy_.max_nodes),
                                 arrived.empty() ? "none" : arrived);
  if (policy_.static_ranks) {
    std::string missing;
    for (int r = 0; r < policy_.max_nodes; ++r) {
      const bool present =
          std::any_of(admitted_.begin(), admitted_.end(),
                      [&](const JoinRequest& a) { return a.requested_node_rank == r; });
      if (!present) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
    }
    if (!missing.empty()) line += fmt::format("; missing node rank(s): {}", missing);
  }
  return line;
}

}  // namespace ddp::rdzv
