// SPDX-License-Identifier: MIT
#pragma once
/// The torchrun environment contract: what each worker gets on top of ddprun's own environment.
/// Pure: the caller passes the parent's environment in and gets a new one back.

#include <map>
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

/// An environment as name → value; ordered so that dumps and dry runs are stable.
using EnvMap = std::map<std::string, std::string>;

/// What changes from one worker (or attempt) to the next.
struct WorkerSlot {
  int local_rank = 0;
  int restart_count = 0;       // TORCHELASTIC_RESTART_COUNT (= attempt number)
  int master_port = 0;         // resolved port (the config may say 0 = free port)
  std::string error_file;      // TORCHELASTIC_ERROR_FILE
};

/// The global rank of `local_rank` on this node (static assignment: node-major).
int global_rank(const LaunchConfig& config, int local_rank);

/// The variables ddprun sets for one worker (overrides and defaults), in a stable order. Defaults
/// (NCCL async error handling, OMP_NUM_THREADS) are only included when `parent` lacks them.
EnvMap worker_env_additions(const LaunchConfig& config, const WorkerSlot& slot,
                            const EnvMap& parent);

/// parent + worker_env_additions(): the full environment of one worker.
EnvMap worker_environment(const LaunchConfig& config, const WorkerSlot& slot, const EnvMap& parent);

/// "NAME=value" strings for execve.
std::vector<std::string> to_envp_strings(const EnvMap& env);

/// Reads `environ` into an EnvMap (the only function here that touches the process).
EnvMap current_environment();

}  // namespace ddp::launcher
