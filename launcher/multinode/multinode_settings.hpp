// SPDX-License-Identifier: MIT
#pragma once
/// Where the job's store lives and how this agent meets the others: resolved from the launch
/// configuration and --rdzv_conf. Pure (no sockets), so every rule is unit-tested.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/common/value_parsers.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/rdzv_settings.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddp::launcher {

/// How this agent relates to the store.
enum class StoreRole {
  Host,     // bind bind_address:port and serve (single node, static node rank 0)
  TryHost,  // c10d: serve if the endpoint is ours and free, else connect as a client
  Client,   // another node's agent serves it
};

struct StorePlan {
  StoreRole role = StoreRole::Host;
  std::string bind_address = "127.0.0.1";  // for Host / TryHost
  std::string connect_host = "127.0.0.1";  // what agents and workers connect to
  int port = 0;                            // 0: the kernel picks (single node only)
};

/// "NAME HASH" of `config`'s command (see MultiNodeSettings::default_id_command).
std::string command_fingerprint(const LaunchConfig& config);

/// The settings of `config` and `settings` that every node must share, by their flag names.
rdzv::AgreedSettings settings_that_must_agree(const LaunchConfig& config,
                                              const MultiNodeSettings& settings);

/// --rdzv_backend etcd or etcd-v2 (torchrun's names; ddprun speaks etcd's v3 API for both).
bool is_etcd_backend(const std::string& backend);

/// True when the job needs the multi-node rendezvous (several nodes, or c10d/etcd even for 1:1).
bool needs_rendezvous(const LaunchConfig& config);

/// The address a store host listens on: the one it was given (a host name is resolved by the
/// store; "localhost" is 127.0.0.1). Every interface only when asked (--rdzv_conf store_bind=).
std::string listen_address_for(const std::string& master_addr);

/// c10d: the store is at --rdzv_endpoint (port 29400 when it has none, like torchrun); the
/// workers' MASTER_ADDR/MASTER_PORT point there too.
Result<Ok> apply_rdzv_endpoint(LaunchConfig& config);

/// Where the store lives for this configuration (master_port 0 keeps 0: the kernel picks).
StorePlan plan_store(const LaunchConfig& config);

/// Rendezvous settings from the configuration, --rdzv_conf and $DDPRUN_RDZV_TOKEN (the
/// --rdzv_conf token wins), every --rdzv_conf value parsed by its key's entry (rdzv_conf.hpp).
/// Unknown --rdzv_conf keys are an error (exit 2): config_from_options() dropped them already.
Result<MultiNodeSettings> multinode_settings(const LaunchConfig& config,
                                             const std::optional<std::string>& env_token,
                                             const std::string& node_name);

}  // namespace ddp::launcher
