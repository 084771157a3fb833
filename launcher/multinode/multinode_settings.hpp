// SPDX-License-Identifier: MIT
#pragma once
/// Where the job's store lives and how this agent meets the others: resolved from the launch
/// configuration and --rdzv_conf. Pure (no sockets), so every rule is unit-tested.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/value_parsers.hpp"
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

/// --rdzv_backend etcd (or etcd-v2): where the cluster is and where this node's agent serves
/// the workers' store when it is a round's node 0.
struct EtcdBackend {
  bool on = false;
  std::string endpoints;           // --rdzv_endpoint: host:port[,host:port...]
  std::string prefix = "/ddprun";  // --rdzv_conf etcd_prefix
  std::string store_address;       // what the other nodes' workers connect to (--local_addr)
  std::string store_bind;          // --rdzv_conf store_bind, else store_address
  int store_port = 0;              // --master_port when given, else a free one
  std::string user;                // --rdzv_conf etcd_user: etcd's own authentication
  std::string password;            // the first line of --rdzv_conf etcd_password_file
  // TLS to etcd: an https:// member, --rdzv_conf protocol=https, or any of the files below.
  bool tls = false;
  std::string tls_ca;    // --rdzv_conf etcd_cacert (torchrun: cacert); empty: the system's CAs
  std::string tls_cert;  // etcd_cert (cert): this client's certificate (--client-cert-auth)
  std::string tls_key;   // etcd_key (key): its private key
};

/// The rendezvous settings of a multi-node job (--nnodes > 1, c10d or etcd).
struct MultiNodeSettings {
  EtcdBackend etcd;
  bool dynamic = false;  // c10d: node ranks on arrival
  std::string run_id;
  std::string token;
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;  // static: --node_rank; dynamic: -1
  int local_world_size = 1;
  std::string node_name;
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds read_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(1)};
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
  /// A joining node gives up when the store's address refused every connection this long
  /// (nothing listens: node 0 failed to open the port, or exited). --rdzv_conf refused_timeout.
  std::chrono::milliseconds refused_timeout{std::chrono::seconds(15)};
  /// Settings that must be the same on every node, checked at join (a mismatch ends the job).
  rdzv::AgreedSettings must_agree;
  /// c10d MIN:MAX: membership changes (re-forms after a lost node) allowed in the whole job.
  int max_rescales = 100;
  /// c10d MIN:MAX: a node whose workers failed this many attempts in a row leaves the job (it is
  /// quarantined) and the others re-form without it. 0: off. --rdzv_conf node_failure_limit.
  int node_failure_limit = 0;
  /// --exclude-hosts: joins from these node names are refused (the node name is --local_addr
  /// when given, else the host name). Per node, not checked at join.
  std::vector<std::string> excluded_hosts;
  /// c10d: when a pending node is admitted. true (default): at once, by a re-form of the running
  /// nodes; false (--rdzv_conf admit=restart): at the job's next restart or re-form.
  bool admit_at_once = true;
  /// Static jobs (--rdzv_conf spares=1): a node that arrives after the job formed waits as a spare
  /// and replaces a lost node (c10d jobs always take spares).
  bool spares = false;
  /// c10d without an explicit id (no --rdzv_id, PET_RDZV_ID or scheduler job id): what this job
  /// runs, "NAME HASH" (the program's file name, and a hash of its content: the script's bytes,
  /// the module's name; never its arguments, which may differ per node). Two jobs on one endpoint
  /// under the default id are one job to the rendezvous; a node whose program differs from the
  /// recorded one is warned at its join (NodeRendezvousOptions::default_id_command). Empty: an
  /// explicit id.
  std::string default_id_command;
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
/// --rdzv_conf token wins). Unknown --rdzv_conf keys are an error (exit 2).
Result<MultiNodeSettings> multinode_settings(const LaunchConfig& config,
                                             const std::optional<std::string>& env_token,
                                             const std::string& node_name);

}  // namespace ddp::launcher
