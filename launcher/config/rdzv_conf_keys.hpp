// SPDX-License-Identifier: MIT
#pragma once
/// The --rdzv_conf keys ddprun reads (docs/launcher.md#multi-node). config_from_options() warns
/// about any other key and drops it (torchrun's handlers ignore keys they do not read);
/// multinode_settings() reads these.

#include <set>
#include <string>

namespace ddp::launcher {

inline const std::set<std::string>& known_rdzv_conf_keys() {
  static const std::set<std::string> kKeys{
      "join_timeout", "last_call_timeout", "close_timeout", "read_timeout", "token", "token_file",
      "heartbeat_interval", "heartbeat_timeout", "timeout", "is_host", "store_bind",
      "refused_timeout", "max_rescales", "node_failure_limit", "admit", "spares", "etcd_prefix",
      "etcd_cacert", "etcd_cert", "etcd_key", "etcd_user", "etcd_password", "etcd_password_file",
      // torchrun's etcd handlers' TLS keys (same meaning)
      "protocol", "cacert", "cert", "key"};
  return kKeys;
}

}  // namespace ddp::launcher
