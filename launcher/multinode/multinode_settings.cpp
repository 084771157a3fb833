// SPDX-License-Identifier: MIT
#include "launcher/multinode/multinode_settings.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>

#include <set>

#include "launcher/common/exit_codes.hpp"
#include "launcher/config/value_parsers.hpp"

namespace ddp::launcher {
namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

bool is_literal_ip(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

bool needs_rendezvous(const LaunchConfig& c) { return c.multi_node() || c.rdzv_backend == "c10d"; }

std::string listen_address_for(const std::string& master_addr) {
  if (master_addr == "localhost") return "127.0.0.1";
  if (is_loopback(master_addr) || is_literal_ip(master_addr)) return master_addr;
  // A name: it may resolve to another address here than on the other nodes (Debian maps the
  // host name to 127.0.1.1), so listen on every interface rather than guess.
  return "0.0.0.0";
}

Result<Ok> apply_rdzv_endpoint(LaunchConfig& c) {
  if (c.rdzv_backend != "c10d") return Ok{};
  if (c.rdzv_endpoint.empty()) {
    return Error{exit_codes::kUsage, "--rdzv_backend=c10d needs --rdzv_endpoint=HOST:PORT"};
  }
  auto endpoint = parse_host_port("--rdzv_endpoint", c.rdzv_endpoint);
  if (!endpoint) return endpoint.error();
  c.master_addr = endpoint->host;
  c.master_port = endpoint->port != 0 ? endpoint->port : 29400;
  return Ok{};
}

StorePlan plan_store(const LaunchConfig& c) {
  StorePlan plan;
  plan.connect_host = c.master_addr;
  plan.port = c.master_port;
  plan.bind_address = listen_address_for(c.master_addr);
  if (c.rdzv_backend == "c10d") {
    // The agent on the endpoint's host serves; binding the exact address decides who that is.
    plan.role = StoreRole::TryHost;
    plan.bind_address = c.master_addr == "localhost" ? "127.0.0.1" : c.master_addr;
  } else if (c.multi_node() && c.node_rank != 0) {
    plan.role = StoreRole::Client;
  }
  return plan;
}

Result<MultiNodeSettings> multinode_settings(const LaunchConfig& c,
                                             const std::optional<std::string>& env_token,
                                             const std::string& node_name) {
  auto usage = [](std::string m) { return Error{exit_codes::kUsage, std::move(m)}; };
  MultiNodeSettings s;
  s.dynamic = c.rdzv_backend == "c10d";
  s.run_id = c.run_id;
  s.min_nodes = c.nnodes.min;
  s.max_nodes = c.nnodes.max;
  s.node_rank = s.dynamic ? -1 : c.node_rank;
  s.local_world_size = c.nproc_per_node;
  s.node_name = node_name;
  if (env_token) s.token = *env_token;
  if (!s.dynamic && s.min_nodes != s.max_nodes) {
    return usage(fmt::format("--nnodes={}:{} needs --rdzv_backend=c10d (static rendezvous has a "
                             "fixed number of nodes)", s.min_nodes, s.max_nodes));
  }
  static const std::set<std::string> kKnown{"join_timeout", "last_call_timeout", "close_timeout",
                                            "read_timeout", "token", "heartbeat_interval",
                                            "heartbeat_timeout", "timeout", "is_host"};
  for (const auto& [key, value] : c.rdzv_conf) {
    if (!kKnown.count(key)) {
      return usage(fmt::format("--rdzv_conf: unknown key '{}' (known: join_timeout, "
                               "last_call_timeout, close_timeout, read_timeout, token, "
                               "heartbeat_interval, heartbeat_timeout)", key));
    }
    if (key == "token") {
      s.token = value;
      continue;
    }
    if (key == "is_host") continue;  // torchrun's hint; ddprun decides by binding the endpoint
    auto seconds = parse_seconds("--rdzv_conf " + key, value);
    if (!seconds) return seconds.error();
    if (*seconds <= 0) return usage(fmt::format("--rdzv_conf {}: must be positive", key));
    auto ms = std::chrono::milliseconds(static_cast<long long>(*seconds * 1000.0));
    if (key == "join_timeout" || key == "timeout") s.join_timeout = ms;
    if (key == "last_call_timeout") s.last_call_timeout = ms;
    if (key == "read_timeout") s.read_timeout = ms;
    if (key == "heartbeat_interval") s.heartbeat_interval = ms;
    if (key == "heartbeat_timeout") s.heartbeat_timeout = ms;
    // close_timeout: accepted; the round closes when the leader publishes the assignment.
  }
  if (s.heartbeat_interval >= s.heartbeat_timeout) {
    return usage(fmt::format("--rdzv_conf: heartbeat_interval ({} ms) must be shorter than "
                             "heartbeat_timeout ({} ms)", s.heartbeat_interval.count(),
                             s.heartbeat_timeout.count()));
  }
  if (!s.dynamic && (c.node_rank < 0 || c.node_rank >= s.max_nodes)) {
    return usage(fmt::format("--node_rank {} is not in 0..{}", c.node_rank, s.max_nodes - 1));
  }
  return s;
}

}  // namespace ddp::launcher
