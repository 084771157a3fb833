// SPDX-License-Identifier: MIT
#pragma once
/// The worker side of the launcher contract: what ddprun (or torchrun) tells each process
/// through its environment. Pure parsing, no LibTorch, so it is unit-tested without processes.

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddp::worker {

/// A missing or malformed launcher variable; what() names the variable and the bad value.
class WorkerEnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Everything a worker reads from the environment set by ddprun/torchrun.
struct WorkerEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  /// Whether LOCAL_WORLD_SIZE was set: only then does the job say how many ranks share a host
  /// (LOCAL_WORLD_SIZE defaults to WORLD_SIZE for thread sizing, but that default proves nothing).
  bool local_world_size_set = false;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 0;
  int restart_count = 0;   ///< TORCHELASTIC_RESTART_COUNT: how often the group restarted.
  std::string error_file;  ///< TORCHELASTIC_ERROR_FILE, empty when unset.
  std::string
      run_id;  ///< TORCHELASTIC_RUN_ID, empty when unset ("none" under a static rendezvous).
  bool use_agent_store = false;  ///< TORCHELASTIC_USE_AGENT_STORE: the launcher hosts the store.
  bool launched = false;  ///< False when no launcher variable was set (plain single process).

  /// The PrefixStore prefix PyTorch's env:// rendezvous uses on the agent's store.
  std::string agent_store_prefix() const;
  /// True only when the launcher said so: LOCAL_WORLD_SIZE set and equal to WORLD_SIZE (a
  /// worker started one per pod, without LOCAL_WORLD_SIZE, may share no host with its peers).
  bool all_ranks_on_this_host() const {
    return launched && local_world_size_set && local_world_size == world_size;
  }
};

/// Reads a variable; std::nullopt when it is unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

/// Parses the launcher variables. When none of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT is set
/// the result is a one-process world (launched == false). Otherwise RANK, WORLD_SIZE, MASTER_ADDR
/// and MASTER_PORT are required; LOCAL_RANK and LOCAL_WORLD_SIZE default to RANK and WORLD_SIZE.
/// Throws WorkerEnvError naming the first missing or malformed variable.
WorkerEnv parse_worker_env(const EnvLookup& lookup);

/// parse_worker_env over the process environment.
WorkerEnv worker_env_from_environment();

}  // namespace ddp::worker
