// SPDX-License-Identifier: MIT
#include "launcher/env/worker_env.hpp"

extern char** environ;  // POSIX

namespace ddp::launcher {

int global_rank(const LaunchConfig& config, int local_rank) {
  return config.node_rank * config.nproc_per_node + local_rank;
}

int global_rank(const LaunchConfig& config, const std::optional<GroupLayout>& group, int local_rank) {
  return group ? group->base_rank + local_rank : global_rank(config, local_rank);
}

EnvMap worker_env_additions(const LaunchConfig& config, const WorkerSlot& slot,
                            const EnvMap& parent, const std::optional<GroupLayout>& group) {
  const int rank = global_rank(config, group, slot.local_rank);
  const int world = group ? group->world_size : config.world_size();
  EnvMap add;
  add["RANK"] = std::to_string(rank);
  add["LOCAL_RANK"] = std::to_string(slot.local_rank);
  add["WORLD_SIZE"] = std::to_string(world);
  add["LOCAL_WORLD_SIZE"] = std::to_string(config.nproc_per_node);
  add["GROUP_RANK"] = std::to_string(group ? group->node_rank : config.node_rank);
  add["GROUP_WORLD_SIZE"] = std::to_string(group ? group->num_nodes : config.nnodes.max);
  add["ROLE_RANK"] = std::to_string(rank);  // one role: role rank = global rank
  add["ROLE_WORLD_SIZE"] = std::to_string(world);
  add["ROLE_NAME"] = config.role;
  add["MASTER_ADDR"] = config.master_addr;
  add["MASTER_PORT"] = std::to_string(slot.master_port);
  add["TORCHELASTIC_RESTART_COUNT"] = std::to_string(slot.restart_count);
  add["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(config.max_restarts);
  add["TORCHELASTIC_RUN_ID"] = config.run_id;
  add["TORCHELASTIC_USE_AGENT_STORE"] = config.use_agent_store ? "True" : "False";
  add["TORCHELASTIC_ERROR_FILE"] = slot.error_file;
  // Defaults that the user's own setting overrides (torchrun does the same).
  for (const char* name : {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"}) {
    if (!parent.count(name)) add.emplace(name, "1");
  }
  if (config.default_omp_threads && !parent.count("OMP_NUM_THREADS")) add.emplace("OMP_NUM_THREADS", "1");
  if (config.bind_gpu && slot.local_rank < static_cast<int>(config.gpus.size())) {
    add["CUDA_VISIBLE_DEVICES"] = config.gpus[slot.local_rank];
  }
  return add;
}

EnvMap worker_environment(const LaunchConfig& config, const WorkerSlot& slot, const EnvMap& parent,
                          const std::optional<GroupLayout>& group) {
  EnvMap env = parent;
  for (auto& [name, value] : worker_env_additions(config, slot, parent, group)) env[name] = value;
  return env;
}

std::vector<std::string> to_envp_strings(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) {
    std::string entry;
    entry.reserve(name.size() + 1 + value.size());
    entry.append(name).append(1, '=').append(value);
    out.push_back(std::move(entry));
  }
  return out;
}

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

}  // namespace ddp::launcher
