#include <doctest/doctest.h>

#include <string>

#include "launcher/scheduler/env_values.hpp"
#include "launcher/scheduler/slurm_detector.hpp"
#include "tests/cluster/unit/env_fixture.hpp"

using namespace ddp::launcher::scheduler;
using ddp::launcher::scheduler::testing::load_env_fixture;

namespace {
bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("slurm: real srun -N2 --ntasks-per-node=1, both tasks") {
  for (int task : {0, 1}) {
    CAPTURE(task);
    auto d = detect_slurm(load_env_fixture("slurm-srun-N2-task" + std::to_string(task) + ".env"));
    REQUIRE(d);
    CHECK(d->scheduler == "slurm");
    CHECK(d->trigger == "SLURM_JOB_ID");
    CHECK(d->nnodes->value == 2);
    CHECK(d->nnodes->origin == "SLURM_STEP_NUM_NODES");
    CHECK(d->node_rank->value == task);
    CHECK(d->node_rank->origin == "SLURM_NODEID");
    CHECK(d->master_addr->value == "n1");
    CHECK(d->master_addr->origin == "SLURM_STEP_NODELIST");
    CHECK(d->master_addr->raw == "n[1-2]");
    CHECK(d->job_id->value == "1");
    CHECK(d->master_port->value == 15001);
    CHECK(d->master_port->origin == "SLURM_JOB_ID");
    CHECK_FALSE(d->refusal);
  }
}

TEST_CASE("slurm: real srun inside sbatch -N2 --ntasks-per-node=1") {
  auto d = detect_slurm(load_env_fixture("slurm-sbatch-N2-srun-task1.env"));
  REQUIRE(d);
  CHECK(d->node_rank->value == 1);
  CHECK(d->nnodes->value == 2);
  CHECK(d->master_addr->value == "n1");
  CHECK(d->job_id->value == "5");
  CHECK_FALSE(d->refusal);
}

TEST_CASE("slurm: refuses one ddprun per task (real srun -N2 -n4)") {
  for (int task = 0; task < 4; ++task) {
    CAPTURE(task);
    auto d =
        detect_slurm(load_env_fixture("slurm-srun-N2-n4-task" + std::to_string(task) + ".env"));
    REQUIRE(d);
    REQUIRE(d->refusal);
    CHECK(contains(*d->refusal, "--ntasks-per-node=1"));
    CHECK(contains(*d->refusal, "SLURM_STEP_NUM_TASKS=4"));
    CHECK(contains(*d->refusal, "SLURM_STEP_NUM_NODES=2"));
  }
}

TEST_CASE("slurm: refuses the batch script of a multi-node job (real sbatch -N2)") {
  auto d = detect_slurm(load_env_fixture("slurm-sbatch-N2-batch.env"));
  REQUIRE(d);
  CHECK(d->nnodes->value == 2);
  CHECK(d->nnodes->origin == "SLURM_NNODES");
  CHECK(d->master_addr->origin == "SLURM_JOB_NODELIST");
  REQUIRE(d->refusal);
  CHECK(contains(*d->refusal, "batch script"));
  CHECK(contains(*d->refusal, "srun --ntasks-per-node=1"));
}

TEST_CASE("slurm: a single-node batch script is fine even with several tasks") {
  Env env = load_env_fixture("slurm-sbatch-N2-batch.env");
  env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = std::string("1");
  env["SLURM_JOB_NODELIST"] = env["SLURM_NODELIST"] = std::string("n1");
  env["SLURM_NTASKS"] = std::string("2");
  auto d = detect_slurm(env);
  REQUIRE(d);
  CHECK_FALSE(d->refusal);
  CHECK(d->nnodes->value == 1);
  CHECK(d->master_addr->value == "n1");
}

TEST_CASE("slurm: refuses the salloc shell on the submit host (real salloc -N2)") {
  auto d = detect_slurm(load_env_fixture("slurm-salloc-N2.env"));
  REQUIRE(d);
  CHECK_FALSE(d->node_rank);
  REQUIRE(d->refusal);
  CHECK(contains(*d->refusal, "salloc"));
}

TEST_CASE("slurm: zero-padded node names with gaps, 5 nodes") {
  auto d = detect_slurm(load_env_fixture("synthetic-slurm-gpu-cluster-node3.env"));
  REQUIRE(d);
  CHECK(d->nnodes->value == 5);
  CHECK(d->node_rank->value == 3);
  CHECK(d->master_addr->value == "gpu012");
  CHECK(d->master_port->value == 15000 + 4187342 % 17768);
  CHECK(d->job_id->value == "4187342");
}

TEST_CASE("slurm: a step on part of the allocation uses the step's nodes") {
  auto d = detect_slurm(load_env_fixture("synthetic-slurm-step-subset.env"));
  REQUIRE(d);
  CHECK(d->nnodes->value == 2);
  CHECK(d->master_addr->value == "c2");
  CHECK(d->node_rank->value == 1);
  CHECK_FALSE(d->refusal);
}

TEST_CASE("slurm: two jobs get different ports, all below the ephemeral range") {
  CHECK(port_from_job_id("1") == 15001);
  CHECK(port_from_job_id("4187342") == 15000 + 11862);  // 4187342 mod 17768
  CHECK(port_from_job_id("4187343") != port_from_job_id("4187342"));
  CHECK(port_from_job_id("99999") == 15000 + 11159);
  // Issue 8 item 21: ids ending in the same four digits no longer share a port.
  CHECK(port_from_job_id("11234") != port_from_job_id("1234"));
  CHECK(port_from_job_id("123451234") != port_from_job_id("1234"));
  CHECK(port_from_job_id("99999999999999999999999") < 32768);  // longer than 64 bits: no overflow
  int hashed = port_from_job_id("slurm.pmix.3.0");
  CHECK(hashed >= 15000);
  CHECK(hashed < 32768);
  CHECK(hashed == port_from_job_id("slurm.pmix.3.0"));
}

TEST_CASE("slurm: a step's reserved ports (srun --resv-ports) win over the derived port") {
  Env env = load_env_fixture("slurm-srun-N2-task1.env");
  env["SLURM_STEP_RESV_PORTS"] = std::string("12000-12015");
  auto d = detect_slurm(env);
  REQUIRE(d);
  CHECK(d->master_port->value == 12000);
  CHECK(d->master_port->origin == "SLURM_STEP_RESV_PORTS");
  env["SLURM_STEP_RESV_PORTS"] = std::string("13001,13005-13006");
  CHECK(detect_slurm(env)->master_port->value == 13001);
  env["SLURM_STEP_RESV_PORTS"] = std::string("none");
  CHECK_THROWS_AS(detect_slurm(env), SchedulerError);
  env["SLURM_STEP_RESV_PORTS"] = std::string("70000-70001");
  CHECK_THROWS_AS(detect_slurm(env), SchedulerError);
}

TEST_CASE("slurm: not detected without a job id, malformed values name the variable") {
  CHECK_FALSE(detect_slurm(Env{{"SLURM_CONF", "/etc/slurm/slurm.conf"}}));
  Env env = load_env_fixture("slurm-srun-N2-task1.env");
  env["SLURM_NODEID"] = std::string("one");
  CHECK_THROWS_WITH_AS(detect_slurm(env), doctest::Contains("SLURM_NODEID='one'"), SchedulerError);
  env = load_env_fixture("slurm-srun-N2-task1.env");
  env["SLURM_STEP_NODELIST"] = std::string("n[1-2");
  CHECK_THROWS_WITH_AS(detect_slurm(env), doctest::Contains("'n[1-2'"), SchedulerError);
  env = load_env_fixture("slurm-srun-N2-task1.env");
  env["SLURM_NODEID"] = std::string("2");
  CHECK_THROWS_WITH_AS(detect_slurm(env), doctest::Contains("SLURM_STEP_NUM_NODES=2"),
                       SchedulerError);
}

TEST_CASE("slurm: node count from the node list when SLURM_NNODES is missing") {
  Env env{{"SLURM_JOB_ID", "7"}, {"SLURM_NODEID", "0"}, {"SLURM_JOB_NODELIST", "a[1-3]"}};
  auto d = detect_slurm(env);
  REQUIRE(d);
  CHECK(d->nnodes->value == 3);
  CHECK(d->nnodes->origin == "SLURM_JOB_NODELIST");
}

TEST_CASE("slurm: real step on part of the allocation (srun -N1 -n1 -w n2 inside sbatch -N2)") {
  auto d = detect_slurm(load_env_fixture("slurm-sbatch-N2-srun-N1-on-n2.env"));
  REQUIRE(d);
  CHECK(d->nnodes->value == 1);
  CHECK(d->node_rank->value == 0);  // SLURM_NODEID counts within the step
  CHECK(d->master_addr->value == "n2");
  CHECK(d->job_id->value == "6");
  CHECK_FALSE(d->refusal);
}
