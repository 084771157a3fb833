// SPDX-License-Identifier: MIT
// The torchrun environment contract for several (nnodes, node_rank, nproc) shapes.
#include <doctest/doctest.h>

#include "launcher/env/worker_env.hpp"

using namespace ddp::launcher;

namespace {
LaunchConfig shape(int nnodes, int node_rank, int nproc) {
  LaunchConfig c;
  c.nnodes = {nnodes, nnodes};
  c.node_rank = node_rank;
  c.nproc_per_node = nproc;
  c.master_addr = "10.0.0.1";
  c.run_id = "job7";
  c.max_restarts = 3;
  c.default_omp_threads = nproc > 1;
  return c;
}
}  // namespace

TEST_CASE("every variable for every rank of several shapes") {
  for (auto [nnodes, node_rank, nproc] :
       std::vector<std::tuple<int, int, int>>{{1, 0, 1}, {1, 0, 4}, {2, 1, 3}, {4, 3, 8}}) {
    LaunchConfig c = shape(nnodes, node_rank, nproc);
    for (int lr = 0; lr < nproc; ++lr) {
      WorkerSlot slot{lr, 2, 29555, "/logs/attempt_2/" + std::to_string(lr) + "/error.json"};
      EnvMap env = worker_environment(c, slot, {{"PATH", "/bin"}});
      const int rank = node_rank * nproc + lr;
      CHECK(env.at("PATH") == "/bin");
      CHECK(env.at("RANK") == std::to_string(rank));
      CHECK(env.at("LOCAL_RANK") == std::to_string(lr));
      CHECK(env.at("WORLD_SIZE") == std::to_string(nnodes * nproc));
      CHECK(env.at("LOCAL_WORLD_SIZE") == std::to_string(nproc));
      CHECK(env.at("GROUP_RANK") == std::to_string(node_rank));
      CHECK(env.at("GROUP_WORLD_SIZE") == std::to_string(nnodes));
      CHECK(env.at("ROLE_RANK") == std::to_string(rank));
      CHECK(env.at("ROLE_WORLD_SIZE") == std::to_string(nnodes * nproc));
      CHECK(env.at("ROLE_NAME") == "default");
      CHECK(env.at("MASTER_ADDR") == "10.0.0.1");
      CHECK(env.at("MASTER_PORT") == "29555");
      CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
      CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "3");
      CHECK(env.at("TORCHELASTIC_RUN_ID") == "job7");
      CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "False");
      CHECK(env.at("TORCHELASTIC_ERROR_FILE") == slot.error_file);
      CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
      CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "1");
      CHECK(env.count("OMP_NUM_THREADS") == (nproc > 1 ? 1u : 0u));
      CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);
    }
  }
}

TEST_CASE("user settings win over defaults; the agent-store switch flips one variable") {
  LaunchConfig c = shape(1, 0, 2);
  EnvMap parent{{"OMP_NUM_THREADS", "7"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}, {"RANK", "99"}};
  EnvMap env = worker_environment(c, {1, 0, 1, "e"}, parent);
  CHECK(env.at("OMP_NUM_THREADS") == "7");
  CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env.at("RANK") == "1");  // the contract always wins over an inherited RANK
  c.use_agent_store = true;
  CHECK(worker_environment(c, {0, 0, 1, "e"}, {}).at("TORCHELASTIC_USE_AGENT_STORE") == "True");
}

TEST_CASE("--bind-gpu gives each worker its one device by local rank") {
  LaunchConfig c = shape(1, 0, 2);
  c.bind_gpu = true;
  c.gpus = {"GPU-aaa", "3"};
  CHECK(worker_environment(c, {0, 0, 1, "e"}, {{"CUDA_VISIBLE_DEVICES", "GPU-aaa,3"}})
            .at("CUDA_VISIBLE_DEVICES") == "GPU-aaa");
  CHECK(worker_environment(c, {1, 0, 1, "e"}, {}).at("CUDA_VISIBLE_DEVICES") == "3");
}

TEST_CASE("envp strings") {
  CHECK(to_envp_strings({{"A", "1"}, {"B", "x=y"}}) == std::vector<std::string>{"A=1", "B=x=y"});
}
