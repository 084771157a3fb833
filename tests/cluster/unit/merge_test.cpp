#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "launcher/scheduler/detection.hpp"
#include "launcher/scheduler/merge.hpp"
#include "launcher/scheduler/plan.hpp"
#include "tests/cluster/unit/env_fixture.hpp"

using namespace ddp::launcher::scheduler;
using ddp::launcher::scheduler::testing::load_env_fixture;

namespace {
NodeSettings merge_in(const std::string& fixture, const NodeOptions& flags) {
  Env env = load_env_fixture(fixture);
  return merge_node_settings(flags, pet_options_from_env(env), detect_scheduler(env));
}
}  // namespace

TEST_CASE("merge: no flags under srun takes everything from Slurm") {
  auto s = merge_in("slurm-srun-N2-task1.env", {});
  CHECK(s.scheduler == "slurm");
  CHECK(s.nnodes->value == NodeRange{2, 2});
  CHECK(s.node_rank->value == 1);
  CHECK(s.master_addr->value == "n1");
  CHECK(s.master_port->value == 15001);
  CHECK(s.rdzv_id->value == "1");
  CHECK(s.rdzv_id->origin == "SLURM_JOB_ID");
  CHECK(s.master_from_scheduler());
  CHECK(s.notes.empty());
}

TEST_CASE("merge: --node_rank 3 in a 2-node allocation names both sources") {
  NodeOptions flags;
  flags.node_rank = 3;
  CHECK_THROWS_WITH_AS(merge_in("slurm-srun-N2-task0.env", flags),
                       "--node_rank=3 is out of range: SLURM_STEP_NUM_NODES=2 gives 2 node(s), "
                       "node ranks 0..1",
                       SchedulerError);
}

TEST_CASE("merge: an explicit node rank that differs from the scheduler's is an error") {
  NodeOptions flags;
  flags.node_rank = 0;
  CHECK_THROWS_WITH_AS(merge_in("slurm-srun-N2-task1.env", flags),
                       doctest::Contains("--node_rank=0 contradicts SLURM_NODEID=1"),
                       SchedulerError);
  flags.node_rank = 1;
  CHECK(merge_in("slurm-srun-N2-task1.env", flags).node_rank->origin == "--node_rank");
}

TEST_CASE("merge: --nnodes must contain the scheduler's node count") {
  NodeOptions flags;
  flags.nnodes = NodeRange{4, 4};
  CHECK_THROWS_WITH_AS(merge_in("slurm-srun-N2-task0.env", flags),
                       doctest::Contains("--nnodes=4 contradicts SLURM_STEP_NUM_NODES=2"),
                       SchedulerError);
  flags.nnodes = NodeRange{1, 4};
  auto s = merge_in("slurm-srun-N2-task0.env", flags);
  CHECK(s.nnodes->value == NodeRange{1, 4});
  CHECK(s.nnodes->origin == "--nnodes");
}

TEST_CASE("merge: PET_* beat the scheduler and must agree with it too") {
  Env env = load_env_fixture("slurm-srun-N2-task1.env");
  env["PET_NNODES"] = std::string("3");
  CHECK_THROWS_WITH_AS(merge_node_settings({}, pet_options_from_env(env), detect_scheduler(env)),
                       doctest::Contains("PET_NNODES=3 contradicts SLURM_STEP_NUM_NODES=2"),
                       SchedulerError);
  env["PET_NNODES"] = std::string("2");
  env["PET_MASTER_PORT"] = std::string("29400");
  auto s = merge_node_settings({}, pet_options_from_env(env), detect_scheduler(env));
  CHECK(s.nnodes->origin == "PET_NNODES");
  CHECK(s.master_port->value == 29400);
  CHECK(s.master_port->origin == "PET_MASTER_PORT");
  REQUIRE(s.notes.size() == 1);
  CHECK(s.notes[0] ==
        "PET_MASTER_PORT=29400 overrides SLURM_JOB_ID=1 (15000 + job id modulo 17768)");
}

TEST_CASE("merge: flags beat PET_* silently (torchrun's contract), with a note") {
  Env env{{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_MASTER_ADDR", "a"}};
  NodeOptions flags;
  flags.master_addr = "b";
  auto s = merge_node_settings(flags, pet_options_from_env(env), detect_scheduler(env));
  CHECK(s.scheduler.empty());
  CHECK(s.master_addr->value == "b");
  CHECK(s.master_addr->origin == "--master_addr");
  CHECK(s.node_rank->origin == "PET_NODE_RANK");
  CHECK_FALSE(s.master_from_scheduler());
  REQUIRE(s.notes.size() == 1);
  CHECK(s.notes[0] == "--master_addr=b overrides PET_MASTER_ADDR=a");
}

TEST_CASE("merge: an explicit master address replaces the scheduler's, noted") {
  NodeOptions flags;
  flags.master_addr = "n1-ib";
  auto s = merge_in("slurm-srun-N2-task0.env", flags);
  CHECK(s.master_addr->value == "n1-ib");
  CHECK(s.notes.at(0).find("--master_addr=n1-ib overrides SLURM_STEP_NODELIST=n[1-2]") == 0);
}

TEST_CASE("merge: a refused Slurm environment is an error as soon as its values are used") {
  CHECK_THROWS_WITH_AS(merge_in("slurm-srun-N2-n4-task2.env", {}),
                       doctest::Contains("--ntasks-per-node=1"), SchedulerError);
  CHECK_THROWS_WITH_AS(merge_in("slurm-sbatch-N2-batch.env", {}), doctest::Contains("batch script"),
                       SchedulerError);
  NodeOptions all;
  all.nnodes = NodeRange{2, 2};
  all.node_rank = 0;
  all.master_addr = "n1";
  auto s = merge_in("slurm-sbatch-N2-batch.env", all);
  CHECK(s.notes.back().find("slurm environment not used") == 0);
}

TEST_CASE("merge: Kubernetes index needs a node count from flags or PET_NNODES") {
  CHECK_THROWS_WITH_AS(
      merge_in("synthetic-k8s-indexed-no-master.env", {}),
      doctest::Contains("JOB_COMPLETION_INDEX=2 is out of range: ddprun's default"),
      SchedulerError);
  auto s = merge_in("synthetic-k8s-jobset-pod1.env", {});
  CHECK(s.nnodes->value == NodeRange{2, 2});
  CHECK(s.nnodes->origin == "PET_NNODES");
  CHECK(s.node_rank->value == 1);
  CHECK(s.rdzv_id->value == "pytorch");
}

TEST_CASE("merge: Kubeflow 1.7 PET_* and pod RANK agree") {
  auto s = merge_in("synthetic-kubeflow-v17-worker0.env", {});
  CHECK(s.node_rank->origin == "PET_NODE_RANK");
  CHECK(s.nnodes->value == NodeRange{2, 2});
}

TEST_CASE("merge: nothing detected and nothing given leaves ddprun's defaults") {
  auto s = merge_node_settings({}, {}, detect_scheduler(Env{}));
  CHECK_FALSE(s.nnodes);
  CHECK_FALSE(s.node_rank);
  CHECK_FALSE(s.master_addr);
  CHECK_FALSE(s.master_port);
  CHECK_FALSE(s.rdzv_id);
  NodeOptions flags;
  flags.node_rank = 1;
  CHECK_THROWS_WITH_AS(merge_node_settings(flags, {}, detect_scheduler(Env{})),
                       doctest::Contains("--node_rank=1 is out of range"), SchedulerError);
}

TEST_CASE("merge: PET_* parsing errors name the variable") {
  CHECK_THROWS_WITH_AS(pet_options_from_env({{"PET_NNODES", "two"}}),
                       doctest::Contains("PET_NNODES"), SchedulerError);
  CHECK_THROWS_WITH_AS(pet_options_from_env({{"PET_NNODES", "3:2"}}), doctest::Contains("'3:2'"),
                       SchedulerError);
  CHECK_THROWS_WITH_AS(pet_options_from_env({{"PET_MASTER_PORT", "70000"}}),
                       doctest::Contains("PET_MASTER_PORT=70000"), SchedulerError);
  CHECK(parse_node_range("1:4", "--nnodes") == NodeRange{1, 4});
  CHECK(parse_node_range("3", "--nnodes") == NodeRange{3, 3});
  CHECK_THROWS_AS(parse_node_range("0", "--nnodes"), SchedulerError);
}

TEST_CASE("plan: detection + PET_* + flags in one call, as ddprun wires it") {
  Env env = load_env_fixture("slurm-srun-N2-task1.env");
  env["PET_MASTER_PORT"] = std::string("29400");
  NodeOptions flags;
  flags.rdzv_id = "my-run";
  auto plan = plan_node_settings(env, flags);
  CHECK(plan.detection.defaults->scheduler == "slurm");
  CHECK(plan.settings.node_rank->value == 1);
  CHECK(plan.settings.master_port->value == 29400);
  CHECK(plan.settings.rdzv_id->value == "my-run");
  CHECK_FALSE(plan.master);
  CHECK_FALSE(plan_node_settings(env, {}, "none").settings.node_rank);
}

TEST_CASE("plan: the process environment is read into an Env") {
  setenv("DDP_SCHEDULER_TEST_VAR", "a=b", 1);
  CHECK(current_environment().at("DDP_SCHEDULER_TEST_VAR") == "a=b");
  unsetenv("DDP_SCHEDULER_TEST_VAR");
}
