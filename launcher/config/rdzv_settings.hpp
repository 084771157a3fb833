// SPDX-License-Identifier: MIT
#pragma once
/// The rendezvous settings of a multi-node job: what multinode_settings() resolves from the
/// launch configuration, and the fields that --rdzv_conf's keys set (rdzv_conf.hpp). Data only,
/// here below multinode/ so that the key table in config/ can name the fields it sets.

#include <chrono>
#include <string>
#include <vector>

#include "rendezvous/rank_assignment.hpp"

namespace ddp::launcher {

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

}  // namespace ddp::launcher
