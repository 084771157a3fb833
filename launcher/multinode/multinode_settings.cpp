// SPDX-License-Identifier: MIT
#include "launcher/multinode/multinode_settings.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>

#include "common/exit_codes.hpp"
#include "launcher/common/value_parsers.hpp"
#include "launcher/config/rdzv_conf.hpp"
#include "rendezvous/etcd/etcd_client.hpp"

namespace ddp::launcher {

bool is_etcd_backend(const std::string& backend) {
  return backend == "etcd" || backend == "etcd-v2";
}

bool needs_rendezvous(const LaunchConfig& c) {
  return c.multi_node() || c.rdzv_backend == "c10d" || is_etcd_backend(c.rdzv_backend);
}

std::string listen_address_for(const std::string& master_addr) {
  if (master_addr == "localhost") return "127.0.0.1";
  // A name is bound as the store resolves it here, never widened to every interface: with
  // Debian's 127.0.1.1 host-name line that is loopback only, so the other nodes are refused
  // at once and --rdzv_conf store_bind=0.0.0.0 (or the IP as --master_addr) is the fix.
  return master_addr;
}

rdzv::AgreedSettings settings_that_must_agree(const LaunchConfig& c, const MultiNodeSettings& s) {
  auto seconds = [](std::chrono::milliseconds ms) {
    return fmt::format("{:g}s", ms.count() / 1000.0);
  };
  return {{"--max_restarts", std::to_string(c.max_restarts)},
          {"--role", c.role},
          {"--nnodes", fmt::format("{}:{}", s.min_nodes, s.max_nodes)},
          // etcd and etcd-v2 are one backend under torchrun's two names.
          {"--rdzv_backend", is_etcd_backend(c.rdzv_backend) ? "etcd" : c.rdzv_backend},
          {"--rdzv_conf join_timeout", seconds(s.join_timeout)},
          {"--rdzv_conf last_call_timeout", seconds(s.last_call_timeout)},
          {"--rdzv_conf read_timeout", seconds(s.read_timeout)},
          {"--rdzv_conf heartbeat_interval", seconds(s.heartbeat_interval)},
          {"--rdzv_conf heartbeat_timeout", seconds(s.heartbeat_timeout)},
          {"--rdzv_conf max_rescales", std::to_string(s.max_rescales)}};
}

Result<Ok> apply_rdzv_endpoint(LaunchConfig& c) {
  if (is_etcd_backend(c.rdzv_backend) && c.rdzv_endpoint.empty()) {
    return Error{exit_codes::kUsage,
                 fmt::format("--rdzv_backend={} needs --rdzv_endpoint=HOST:PORT[,HOST:PORT...] "
                             "(the etcd members)",
                             c.rdzv_backend)};
  }
  if (c.rdzv_backend != "c10d") return Ok{};
  if (c.rdzv_endpoint.empty()) {
    return Error{exit_codes::kUsage, "--rdzv_backend=c10d needs --rdzv_endpoint=HOST:PORT"};
  }
  auto endpoint = parse_host_port("--rdzv_endpoint", c.rdzv_endpoint);
  if (!endpoint) return endpoint.error();
  c.master_addr = endpoint->host;
  c.master_port = endpoint->port != 0 ? endpoint->port : 29400;  // torchrun's c10d default
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
  } else if (is_etcd_backend(c.rdzv_backend) || (c.multi_node() && c.node_rank != 0)) {
    // etcd: no job-wide store (a round's node 0 hosts the workers'); static: node 0 hosts it.
    plan.role = StoreRole::Client;
  }
  if (auto asked = c.rdzv_conf.find("store_bind"); asked != c.rdzv_conf.end())
    plan.bind_address = asked->second;
  return plan;
}

namespace {

/// etcd's TLS and user settings, as given together: the first one that is wrong, with the flag
/// it came from. Sets `etcd.tls` when any member or setting asks for TLS.
std::optional<std::string> check_etcd_access(EtcdBackend& etcd) {
  if (etcd.on) {
    if (etcd.tls_cert.empty() != etcd.tls_key.empty()) {
      return "--rdzv_conf: etcd_cert and etcd_key go together (this client's certificate and its "
             "key)";
    }
    for (const auto& member : rdzv::etcd::parse_endpoints(etcd.endpoints))
      etcd.tls = etcd.tls || member.https;
    etcd.tls = etcd.tls || !etcd.tls_ca.empty() || !etcd.tls_cert.empty();
    if (etcd.tls) {
      if (auto wrong =
              rdzv::etcd::tls_setup_error({true, etcd.tls_ca, etcd.tls_cert, etcd.tls_key}))
        return "--rdzv_conf: " + *wrong;
    }
  }
  if (etcd.user.empty() != etcd.password.empty()) {
    return "--rdzv_conf: etcd_user and etcd_password_file go together (etcd's own user and its "
           "password)";
  }
  return std::nullopt;
}

}  // namespace

Result<MultiNodeSettings> multinode_settings(const LaunchConfig& c,
                                             const std::optional<std::string>& env_token,
                                             const std::string& node_name) {
  auto usage = [](std::string m) { return Error{exit_codes::kUsage, std::move(m)}; };
  MultiNodeSettings s;
  s.etcd.on = is_etcd_backend(c.rdzv_backend);
  s.dynamic = c.rdzv_backend == "c10d" || s.etcd.on;
  if (s.etcd.on) {
    try {  // every member's address, before any node waits on them
      (void)rdzv::etcd::parse_endpoints(c.rdzv_endpoint);
    } catch (const std::invalid_argument& e) {
      return usage(fmt::format("--rdzv_endpoint: {} (the etcd members: HOST:PORT[,HOST:PORT...])",
                               e.what()));
    }
    s.etcd.endpoints = c.rdzv_endpoint;
    s.etcd.store_address = c.local_addr.empty() ? node_name : c.local_addr;
    s.etcd.store_bind = listen_address_for(s.etcd.store_address);
    s.etcd.store_port = c.master_port;
  }
  s.run_id = c.run_id;
  s.min_nodes = c.nnodes.min;
  s.max_nodes = c.nnodes.max;
  s.node_rank = s.dynamic ? -1 : c.node_rank;
  s.local_world_size = c.nproc_per_node;
  s.node_name = node_name;
  if (env_token) s.token = *env_token;
  if (!s.dynamic && s.min_nodes != s.max_nodes) {
    return usage(
        fmt::format("--nnodes={}:{} needs --rdzv_backend=c10d (static rendezvous has a "
                    "fixed number of nodes)",
                    s.min_nodes, s.max_nodes));
  }
  for (const auto& [key, value] : c.rdzv_conf) {
    const RdzvConfKey* entry = find_rdzv_conf_key(key);
    if (entry == nullptr) {  // config_from_options() already dropped these
      return usage(
          fmt::format("--rdzv_conf: unknown key '{}' (known: {})", key, rdzv_conf_key_names()));
    }
    if (key == "token" && c.rdzv_conf.count("token_file"))
      return usage("--rdzv_conf: token and token_file both given; use one");
    if (auto applied = entry->apply("--rdzv_conf " + key, value, s); !applied)
      return applied.error();
  }
  if (auto wrong = check_etcd_access(s.etcd)) return usage(*wrong);
  if (s.heartbeat_interval >= s.heartbeat_timeout) {
    return usage(
        fmt::format("--rdzv_conf: heartbeat_interval ({} ms) must be shorter than "
                    "heartbeat_timeout ({} ms)",
                    s.heartbeat_interval.count(), s.heartbeat_timeout.count()));
  }
  if (!s.dynamic && (c.node_rank < 0 || c.node_rank >= s.max_nodes)) {
    return usage(fmt::format("--node_rank {} is not in 0..{}", c.node_rank, s.max_nodes - 1));
  }
  s.excluded_hosts = c.exclude_hosts;
  if (auto excluded = rdzv::exclusion(s.excluded_hosts, s.node_name)) {
    return Error{exit_codes::kUnavailable, *excluded};
  }
  s.must_agree = settings_that_must_agree(c, s);
  if (c.rdzv_backend == "c10d" && !c.run_id_given) s.default_id_command = command_fingerprint(c);
  return s;
}

std::string command_fingerprint(const LaunchConfig& c) {
  // What the program IS, not what it is called nor its arguments: the nodes of one job may reach
  // the same script by different paths or names and pass node-specific arguments (torchrun runs
  // them as one job), while two projects' train.py are different programs.
  const size_t slash = c.program.find_last_of('/');
  const std::string name = slash == std::string::npos ? c.program : c.program.substr(slash + 1);
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a: stable across builds and hosts
  auto mix = [&hash](std::string_view text) {
    for (unsigned char ch : text) {
      hash ^= ch;
      hash *= 1099511628211ull;
    }
    hash ^= 0x100;  // ends each word: ("ab", "c") and ("a", "bc") differ
    hash *= 1099511628211ull;
  };
  // Larger files (a big executable) are told apart by their size: reading them at every launch
  // costs more than the check is worth.
  constexpr std::streamoff kMaxHashedBytes = 16 << 20;
  std::ifstream file;
  if (c.program_kind != ProgramKind::PythonModule) file.open(c.program, std::ios::binary);
  file.seekg(0, std::ios::end);
  const std::streamoff size = file ? static_cast<std::streamoff>(file.tellg()) : -1;
  if (c.program_kind == ProgramKind::PythonModule) {
    mix("-m");
    mix(c.program);
  } else if (size < 0) {
    mix(name);  // not a file here (found on PATH by exec): its name is all there is
  } else if (size > kMaxHashedBytes) {
    mix(fmt::format("size {}", size));
  } else {
    file.seekg(0);
    std::string content(static_cast<size_t>(size), '\0');
    file.read(content.data(), size);
    mix(content);
  }
  return fmt::format("{} {:016x}", name, hash);
}

}  // namespace ddp::launcher
