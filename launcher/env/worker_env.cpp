// SPDX-License-Identifier: MIT
#include "launcher/env/worker_env.hpp"

extern char** environ;  // POSIX

namespace ddp::launcher {
namespace {

// The rendezvous token is the agents' secret: a worker (or anything it starts) must not be able
// to join, stop or read the rendezvous keys. PET_RDZV_CONF keeps its other entries.
void drop_rendezvous_token(EnvMap& env) {
  env.erase("DDPRUN_RDZV_TOKEN");
  auto conf = env.find("PET_RDZV_CONF");
  if (conf == env.end()) return;
  std::string kept;
  std::size_t start = 0;
  while (start <= conf->second.size()) {
    std::size_t end = conf->second.find(',', start);
    if (end == std::string::npos) end = conf->second.size();
    const std::string entry = conf->second.substr(start, end - start);
    std::string key = entry.substr(0, entry.find('='));
    key.erase(0, key.find_first_not_of(' '));
    key.erase(key.find_last_not_of(' ') + 1);
    if (!entry.empty() && key != "token") kept += (kept.empty() ? "" : ",") + entry;
    start = end + 1;
  }
  if (kept.empty()) {
    env.erase(conf);
  } else {
    conf->second = kept;
  }
}

}  // namespace

int global_rank(const LaunchConfig& config, int local_rank) {
  return config.node_rank * config.nproc_per_node + local_rank;
}

int global_rank(const LaunchConfig& config, const std::optional<GroupLayout>& group,
                int local_rank) {
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
  add["MASTER_ADDR"] = slot.master_addr.empty() ? config.master_addr : slot.master_addr;
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
  if (config.default_omp_threads && !parent.count("OMP_NUM_THREADS"))
    add.emplace("OMP_NUM_THREADS", "1");
  if (config.bind_gpu && slot.local_rank < static_cast<int>(config.gpus.size())) {
    add["CUDA_VISIBLE_DEVICES"] = config.gpus[slot.local_rank];
  }
  if (config.virtual_local_rank) {  // torchrun: every worker sees its own device as device 0
    add["LOCAL_RANK"] = "0";
    auto parent_devices = parent.find("CUDA_VISIBLE_DEVICES");
    add["CUDA_VISIBLE_DEVICES"] =
        parent_devices != parent.end() && slot.local_rank < static_cast<int>(config.gpus.size())
            ? config.gpus[slot.local_rank]
            : std::to_string(slot.local_rank);
  }
  return add;
}

EnvMap worker_environment(const LaunchConfig& config, const WorkerSlot& slot, const EnvMap& parent,
                          const std::optional<GroupLayout>& group) {
  EnvMap env = parent;
  drop_rendezvous_token(env);
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
