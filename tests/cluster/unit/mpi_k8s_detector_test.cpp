#include <doctest/doctest.h>

#include <string>

#include "launcher/scheduler/detection.hpp"
#include "launcher/scheduler/k8s_detectors.hpp"
#include "launcher/scheduler/mpi_detectors.hpp"
#include "tests/cluster/unit/env_fixture.hpp"

using namespace ddp::launcher::scheduler;
using ddp::launcher::scheduler::testing::load_env_fixture;

TEST_CASE("openmpi: real mpirun -np 2 on one host") {
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    auto d = detect_openmpi(load_env_fixture("ompi-np2-rank" + std::to_string(rank) + ".env"));
    REQUIRE(d);
    CHECK(d->scheduler == "openmpi");
    CHECK(d->node_rank->value == rank);
    CHECK(d->node_rank->origin == "OMPI_COMM_WORLD_RANK");
    CHECK(d->nnodes->value == 2);
    CHECK(d->nnodes->origin == "OMPI_COMM_WORLD_SIZE");
    CHECK(d->master_addr->value == "127.0.0.1");
    CHECK(d->master_addr->origin == "OMPI_COMM_WORLD_LOCAL_SIZE");
    CHECK(d->job_id->origin == "OMPI_MCA_ess_base_jobid");
    CHECK(d->master_port->value >= 15000);
    CHECK_FALSE(d->notes.empty());  // two ddprun share the host: noted, not refused
    CHECK_FALSE(d->refusal);
  }
  CHECK(detect_openmpi(load_env_fixture("ompi-np2-rank0.env"))->master_port->value ==
        detect_openmpi(load_env_fixture("ompi-np2-rank1.env"))->master_port->value);
}

TEST_CASE("openmpi: real mpirun --map-by ppr:1:node inside sbatch -N2 wins over the SLURM_* vars") {
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    auto detection = detect_scheduler(
        load_env_fixture("ompi-in-sbatch-N2-rank" + std::to_string(rank) + ".env"));
    REQUIRE(detection.defaults);
    const auto& d = *detection.defaults;
    CHECK(d.scheduler == "openmpi");
    CHECK(d.node_rank->value == rank);
    CHECK(d.nnodes->value == 2);
    CHECK(d.master_addr->value == "n1");
    CHECK(d.master_addr->origin == "SLURM_JOB_NODELIST");
    CHECK(d.notes.empty());
    CHECK(detection.also_present == std::vector<std::string>{"slurm", "pmix"});
  }
}

TEST_CASE("openmpi: MASTER_ADDR/MASTER_PORT exported with mpirun -x win, otherwise a note asks") {
  Env env{{"OMPI_COMM_WORLD_RANK", "1"},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
          {"OMPI_MCA_ess_base_jobid", "77"}};
  auto d = detect_openmpi(env);
  REQUIRE(d);
  CHECK_FALSE(d->master_addr);
  CHECK(d->notes.at(0).find("--master_addr") != std::string::npos);
  env["MASTER_ADDR"] = std::string("head");
  env["MASTER_PORT"] = std::string("4000");
  d = detect_openmpi(env);
  CHECK(d->master_addr->value == "head");
  CHECK(d->master_port->value == 4000);
  CHECK(d->master_port->origin == "MASTER_PORT");
}

TEST_CASE("pmix: real srun --mpi=pmix is Slurm first, PMIx alone gives the rank only") {
  Env env = load_env_fixture("slurm-srun-pmix-N2-task1.env");
  auto detection = detect_scheduler(env);
  CHECK(detection.defaults->scheduler == "slurm");
  CHECK(detection.also_present == std::vector<std::string>{"pmix"});
  auto d = detect_pmix(env);
  REQUIRE(d);
  CHECK(d->node_rank->value == 1);
  CHECK(d->job_id->value == "slurm.pmix.3.0");
  CHECK_FALSE(d->nnodes);
  auto forced = detect_scheduler(env, "pmix");
  CHECK(forced.defaults->scheduler == "pmix");
}

TEST_CASE("pmi: MPICH Hydra, one rank per host") {
  auto d = detect_pmi(load_env_fixture("synthetic-mpich-hydra-rank1.env"));
  REQUIRE(d);
  CHECK(d->node_rank->value == 1);
  CHECK(d->nnodes->value == 2);
  CHECK(d->master_addr->value == "a");
  CHECK(d->master_addr->origin == "MASTER_ADDR");
}

TEST_CASE("k8s: JobSet pod with MASTER_ADDR from the manifest") {
  auto detection = detect_scheduler(load_env_fixture("synthetic-k8s-jobset-pod1.env"));
  REQUIRE(detection.defaults);
  const auto& d = *detection.defaults;
  CHECK(d.scheduler == "k8s-indexed");
  CHECK(d.node_rank->value == 1);
  CHECK(d.node_rank->origin == "JOB_COMPLETION_INDEX");
  CHECK(d.master_addr->value == "pytorch-workers-0-0.pytorch");
  CHECK(d.master_port->value == 29500);
  CHECK(d.job_id->value == "pytorch");
  CHECK_FALSE(d.nnodes);
}

TEST_CASE("k8s: an Indexed Job without MASTER_ADDR says what to set") {
  auto d = detect_k8s_indexed(load_env_fixture("synthetic-k8s-indexed-no-master.env"));
  REQUIRE(d);
  CHECK_FALSE(d->master_addr);
  CHECK(d->notes.at(0).find("MASTER_ADDR") != std::string::npos);
}

TEST_CASE("kubeflow v1: RANK is the pod index, WORLD_SIZE the pod count") {
  auto detection = detect_scheduler(load_env_fixture("synthetic-kubeflow-v1-worker1.env"));
  REQUIRE(detection.defaults);
  const auto& d = *detection.defaults;
  CHECK(d.scheduler == "kubeflow");
  CHECK(d.node_rank->value == 2);
  CHECK(d.nnodes->value == 3);
  CHECK(d.master_addr->value == "mnist-master-0");
  CHECK(d.master_port->value == 23456);
}

TEST_CASE("kubeflow >= 1.7: WORLD_SIZE counts processes and is not taken as the node count") {
  auto d = detect_kubeflow(load_env_fixture("synthetic-kubeflow-v17-worker0.env"));
  REQUIRE(d);
  CHECK_FALSE(d->nnodes);
  CHECK(d->node_rank->value == 1);
  CHECK(d->notes.at(0).find("WORLD_SIZE=8") != std::string::npos);
}

TEST_CASE("a torchrun/ddprun worker's environment is not a Kubeflow pod") {
  auto detection = detect_scheduler(load_env_fixture("synthetic-torchrun-worker.env"));
  CHECK_FALSE(detection.defaults);
}

TEST_CASE("detection order and --scheduler choices") {
  std::vector<std::string> names;
  for (const auto& info : detection_order()) names.emplace_back(info.name);
  CHECK(names ==
        std::vector<std::string>{"openmpi", "slurm", "pmix", "pmi", "k8s-indexed", "kubeflow"});
  Env env = load_env_fixture("slurm-srun-N2-task0.env");
  CHECK_FALSE(detect_scheduler(env, "none").defaults);
  CHECK(detect_scheduler(env, "slurm").defaults->scheduler == "slurm");
  CHECK_THROWS_WITH_AS(detect_scheduler(env, "openmpi"),
                       doctest::Contains("OMPI_COMM_WORLD_RANK is not set"), SchedulerError);
  CHECK_THROWS_WITH_AS(detect_scheduler(env, "lsf"),
                       doctest::Contains("valid: auto, none, openmpi"), SchedulerError);
  CHECK_FALSE(detect_scheduler(Env{}).defaults);
}

TEST_CASE("a malformed later environment is listed, not fatal") {
  Env env = load_env_fixture("slurm-srun-N2-task0.env");
  env["PMI_RANK"] = std::string("x");
  auto detection = detect_scheduler(env);
  CHECK(detection.defaults->scheduler == "slurm");
  REQUIRE(detection.also_present.size() == 1);
  CHECK(detection.also_present[0].find("pmi (malformed") == 0);
}
