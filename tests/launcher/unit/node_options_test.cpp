// SPDX-License-Identifier: MIT
// The five node options (--nnodes, --node_rank, --master_addr, --master_port, --rdzv_id): typed
// flag > PET_* > the scheduler's environment > ddprun's default. The environment is a map (a real
// srun/mpirun dump from tests/cluster/fixtures or a few variables), never the process's own.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>

#include "launcher/config/cli.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/node_plan.hpp"
#include "tests/cluster/unit/env_fixture.hpp"

using namespace ddp::launcher;

namespace {

using Env = std::map<std::string, std::string>;

Env fixture(const std::string& name) { return scheduler::testing::load_env_fixture(name); }

Result<ConfiguredLaunch> configure(std::vector<std::string> args, Env env = {}) {
  auto parsed = parse_command_line(args);
  if (!parsed) return parsed.error();
  HostFacts host;
  host.cpu_count = 4;
  host.fresh_run_id = "fresh";
  host.environment = std::move(env);
  return config_from_options(parsed->raw, host);
}

std::string error_of(std::vector<std::string> args, Env env = {}) {
  auto r = configure(std::move(args), std::move(env));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().exit_code == 2);
  CHECK(r.error().message.find('\n') == std::string::npos);  // one line
  return r.error().message;
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("without flags, PET_* or a scheduler: torchrun's defaults") {
  auto r = configure({"prog"});
  REQUIRE(r.ok());
  CHECK(r->config.nnodes == NodeRange{1, 1});
  CHECK(r->config.node_rank == 0);
  CHECK(r->config.master_addr == "127.0.0.1");
  CHECK(r->config.master_port == 0);
  CHECK(r->config.run_id == "none");
  CHECK_FALSE(r->master_needs_resolving);
  CHECK(r->node_plan.detection.defaults == std::nullopt);
}

TEST_CASE("PET_* node variables are a fallback and the command line wins, in both spellings") {
  const Env pet{{"PET_NNODES", "3"},
                {"PET_NODE_RANK", "2"},
                {"PET_MASTER_ADDR", "head"},
                {"PET_MASTER_PORT", "1234"},
                {"PET_RDZV_ID", "job7"}};
  auto from_env = configure({"prog"}, pet);
  REQUIRE(from_env.ok());
  CHECK(from_env->config.nnodes == NodeRange{3, 3});
  CHECK(from_env->config.node_rank == 2);
  CHECK(from_env->config.master_addr == "head");
  CHECK(from_env->config.master_port == 1234);
  CHECK(from_env->config.run_id == "job7");
  CHECK_FALSE(from_env->master_needs_resolving);  // typed names are network names

  for (bool dashes : {false, true}) {
    auto flag = [&](const std::string& underscore) {
      std::string name = underscore;
      if (dashes) std::replace(name.begin(), name.end(), '_', '-');
      return name;
    };
    auto cli = configure({"--nnodes", "4", flag("--node_rank"), "3", flag("--master_addr"), "other",
                          flag("--master_port") + "=999", flag("--rdzv_id"), "mine", "prog"},
                         pet);
    REQUIRE_MESSAGE(cli.ok(), dashes);
    CHECK(cli->config.nnodes == NodeRange{4, 4});
    CHECK(cli->config.node_rank == 3);
    CHECK(cli->config.master_addr == "other");
    CHECK(cli->config.master_port == 999);
    CHECK(cli->config.run_id == "mine");
    CHECK(contains(cli->notices.at(0), "--nnodes=4 overrides PET_NNODES=3"));
  }
  CHECK(contains(error_of({"prog"}, {{"PET_NODE_RANK", "x"}}), "PET_NODE_RANK"));
  CHECK(contains(error_of({"prog"}, {{"PET_MASTER_PORT", "70000"}}), "PET_MASTER_PORT=70000"));
  CHECK(contains(error_of({"prog"}, {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "2"}}),
                 "PET_NODE_RANK=2 is out of range: PET_NNODES=2 gives 2 node(s)"));
}

TEST_CASE("inside srun -N2 --ntasks-per-node=1: every node value comes from Slurm") {
  auto r = configure({"--nproc_per_node", "2", "prog"}, fixture("slurm-srun-N2-task1.env"));
  REQUIRE(r.ok());
  CHECK(r->config.nnodes == NodeRange{2, 2});
  CHECK(r->config.node_rank == 1);
  CHECK(r->config.master_addr == "n1");  // a Slurm node name: main() resolves it
  CHECK(r->master_needs_resolving);
  CHECK(r->config.master_port == 15001);  // 15000 + the job id modulo 17768
  CHECK(r->config.run_id == "1");
  CHECK(r->node_plan.settings.scheduler == "slurm");
  CHECK(r->config.world_size() == 4);

  // Explicit values that agree, or that Slurm does not constrain, are taken.
  auto typed =
      configure({"--node_rank", "1", "--master_addr", "n1-ib", "--master_port", "4000", "prog"},
                fixture("slurm-srun-N2-task1.env"));
  REQUIRE(typed.ok());
  CHECK(typed->config.master_addr == "n1-ib");
  CHECK_FALSE(typed->master_needs_resolving);
  CHECK(typed->config.master_port == 4000);
}

TEST_CASE("a flag that contradicts the scheduler is a usage error naming both sources") {
  const Env slurm = fixture("slurm-srun-N2-task1.env");
  auto out_of_range = error_of({"--node_rank", "3", "prog"}, slurm);
  CHECK(contains(out_of_range, "--node_rank=3"));
  CHECK(contains(out_of_range, "SLURM_STEP_NUM_NODES=2"));
  auto wrong_rank = error_of({"--node_rank", "0", "prog"}, slurm);
  CHECK(contains(wrong_rank, "--node_rank=0 contradicts SLURM_NODEID=1"));
  auto wrong_count = error_of({"--nnodes", "4", "prog"}, slurm);
  CHECK(contains(wrong_count, "--nnodes=4 contradicts SLURM_STEP_NUM_NODES=2"));
  CHECK(configure({"--nnodes", "1:4", "prog"}, slurm).ok());  // the range contains 2
  auto pet_rank = error_of({"prog"}, [&] {
    Env e = slurm;
    e["PET_NODE_RANK"] = "0";
    return e;
  }());
  CHECK(contains(pet_rank, "PET_NODE_RANK=0 contradicts SLURM_NODEID=1"));
}

TEST_CASE("--scheduler selects or disables detection; --standalone implies none") {
  const Env slurm = fixture("slurm-srun-N2-task1.env");
  for (auto args : std::vector<std::vector<std::string>>{{"--scheduler", "none", "prog"},
                                                         {"--standalone", "prog"}}) {
    auto r = configure(args, slurm);
    REQUIRE(r.ok());
    CHECK(r->config.nnodes == NodeRange{1, 1});
    CHECK(r->config.node_rank == 0);
    CHECK(r->config.master_addr == "127.0.0.1");
    CHECK(r->node_plan.settings.scheduler.empty());
  }
  auto forced = configure({"--scheduler=slurm", "prog"}, slurm);
  REQUIRE(forced.ok());
  CHECK(forced->config.node_rank == 1);
  CHECK(contains(error_of({"--scheduler", "lsf", "prog"}, slurm), "lsf"));
  CHECK(contains(error_of({"--scheduler", "openmpi", "prog"}, slurm), "openmpi"));
}

TEST_CASE("Slurm misuse is refused with what to type instead") {
  auto per_task = error_of({"prog"}, fixture("slurm-srun-N2-n4-task2.env"));
  CHECK(contains(per_task, "--ntasks-per-node=1"));
  auto batch = error_of({"prog"}, fixture("slurm-sbatch-N2-batch.env"));
  CHECK(contains(batch, "batch script"));
}

TEST_CASE("one node under a scheduler keeps 127.0.0.1 and a free port") {
  Env one_node = fixture("slurm-srun-N2-task1.env");
  for (auto name : {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES",
                    "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}) {
    one_node[name] = "1";
  }
  one_node["SLURM_NODEID"] = "0";
  one_node["SLURM_STEP_NODELIST"] = one_node["SLURM_JOB_NODELIST"] = one_node["SLURM_NODELIST"] =
      "n2";
  auto r = configure({"prog"}, one_node);
  REQUIRE(r.ok());
  CHECK(r->config.nnodes == NodeRange{1, 1});
  CHECK(r->config.master_addr == "127.0.0.1");
  CHECK(r->config.master_port == 0);
  CHECK_FALSE(r->master_needs_resolving);
  CHECK(r->config.run_id == "1");
}

TEST_CASE("under mpirun -np 2 on one host: one 2-node job on 127.0.0.1") {
  for (int rank : {0, 1}) {
    auto r = configure({"prog"}, fixture(fmt::format("ompi-np2-rank{}.env", rank)));
    REQUIRE(r.ok());
    CHECK(r->config.nnodes == NodeRange{2, 2});
    CHECK(r->config.node_rank == rank);
    CHECK(r->config.master_addr == "127.0.0.1");
    CHECK(r->config.master_port >= 15000);
    CHECK(r->config.master_port < 32768);
  }
}

TEST_CASE("--print-env-detect needs no program; the plan works from the options alone") {
  auto parsed = parse_command_line({"--print-env-detect"});
  REQUIRE(parsed.ok());
  CHECK(parsed->raw.print_env_detect);
  auto plan = plan_launch_nodes(parsed->raw, fixture("slurm-srun-N2-task1.env"));
  REQUIRE(plan.ok());
  CHECK(plan->settings.node_rank->value == 1);
  CHECK(plan->settings.node_rank->origin == "SLURM_NODEID");
  CHECK(parse_command_line({"--print_env_detect"}).ok());
}
