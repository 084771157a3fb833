// SPDX-License-Identifier: MIT
#pragma once
/// The torchrun environment contract: what each worker gets on top of ddprun's own environment.
/// Pure: the caller passes the parent's environment in and gets a new one back.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

/// An environment as name → value; ordered so that dumps and dry runs are stable.
using EnvMap = std::map<std::string, std::string>;

/// Where this node's workers sit in the job, as the multi-node rendezvous decided (node ranks
/// on arrival, local world sizes that differ between nodes).
struct GroupLayout {
  int node_rank = 0;
  int num_nodes = 1;
  int base_rank = 0;  // RANK of LOCAL_RANK 0
  int world_size = 1;
};

/// What changes from one worker (or attempt) to the next.
struct WorkerSlot {
  int local_rank = 0;
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT (= attempt number)
  int master_port = 0;        // resolved port (the config may say 0 = free port)
  std::string error_file;     // TORCHELASTIC_ERROR_FILE
  std::string master_addr{};  // empty: the config's; set: this node's store proxy
};

/// The global rank of `local_rank` on this node (static assignment: node-major).
int global_rank(const LaunchConfig& config, int local_rank);
/// The same with the rendezvous' layout when there is one.
int global_rank(const LaunchConfig& config, const std::optional<GroupLayout>& group,
                int local_rank);

/// The variables ddprun sets for one worker (overrides and defaults), in a stable order. Defaults
/// (NCCL async error handling, OMP_NUM_THREADS) are only included when `parent` lacks them.
/// `group`: the rendezvous' layout (multi-node); nullopt: the static layout of the configuration.
EnvMap worker_env_additions(const LaunchConfig& config, const WorkerSlot& slot,
                            const EnvMap& parent,
                            const std::optional<GroupLayout>& group = std::nullopt);

/// parent + worker_env_additions(): the full environment of one worker.
EnvMap worker_environment(const LaunchConfig& config, const WorkerSlot& slot, const EnvMap& parent,
                          const std::optional<GroupLayout>& group = std::nullopt);

/// "NAME=value" strings for execve.
std::vector<std::string> to_envp_strings(const EnvMap& env);

/// Reads `environ` into an EnvMap (the only function here that touches the process).
EnvMap current_environment();

}  // namespace ddp::launcher
