#include <doctest/doctest.h>

#include <string>

#include "launcher/scheduler/report.hpp"
#include "tests/cluster/unit/env_fixture.hpp"

using namespace ddp::launcher::scheduler;
using ddp::launcher::scheduler::testing::load_env_fixture;

TEST_CASE("report: names the scheduler and every value's variable") {
  Env env = load_env_fixture("slurm-srun-N2-task1.env");
  auto detection = detect_scheduler(env);
  auto settings = merge_node_settings({}, pet_options_from_env(env), detection);
  HostResolution master{"n1", "127.0.0.1", "Slurm NodeAddr (scontrol show node n1)"};
  std::string text = render_detection_report(detection, settings, master);
  CAPTURE(text);
  CHECK(text.find("scheduler: slurm (selected by SLURM_JOB_ID)") != std::string::npos);
  CHECK(text.find("from SLURM_STEP_NUM_NODES=2") != std::string::npos);
  CHECK(text.find("from SLURM_NODEID=1") != std::string::npos);
  CHECK(text.find("from SLURM_STEP_NODELIST=n[1-2] (first host of the list)") != std::string::npos);
  CHECK(text.find("15001") != std::string::npos);
  CHECK(text.find("127.0.0.1        n1 resolved by Slurm NodeAddr") != std::string::npos);
  CHECK(text.find("effective values") != std::string::npos);
}

TEST_CASE("report: nothing detected lists what was looked for") {
  auto detection = detect_scheduler(Env{});
  std::string text = render_detection_report(detection, merge_node_settings({}, {}, detection));
  CHECK(text.find("scheduler: none detected (none of OMPI_COMM_WORLD_RANK, SLURM_JOB_ID") !=
        std::string::npos);
  CHECK(text.find("default 127.0.0.1") != std::string::npos);
  CHECK(text.find("default: a free port (one node)") != std::string::npos);
  CHECK(text.find("note: one node") == std::string::npos);  // nothing from a scheduler to ignore
}

TEST_CASE("report: a one-node step says the scheduler's master host and port are not used") {
  Env env = load_env_fixture("slurm-sbatch-N2-srun-N1-on-n2.env");
  auto detection = detect_scheduler(env);
  auto settings = merge_node_settings({}, pet_options_from_env(env), detection);
  REQUIRE(settings.nnodes);
  REQUIRE(settings.nnodes->value.max == 1);
  std::string text = render_detection_report(detection, settings);
  CAPTURE(text);
  CHECK(text.find("note: one node: ddprun ignores the scheduler's master host and port") !=
        std::string::npos);
  auto two =
      merge_node_settings({}, {}, detect_scheduler(load_env_fixture("slurm-srun-N2-task1.env")));
  CHECK(render_detection_report(detect_scheduler(load_env_fixture("slurm-srun-N2-task1.env")), two)
            .find("note: one node") == std::string::npos);
}

TEST_CASE("report: refusal, notes and other environments are shown") {
  Env env = load_env_fixture("ompi-np2-rank0.env");
  auto detection = detect_scheduler(env);
  std::string text = render_detection_report(detection, merge_node_settings({}, {}, detection));
  CHECK(text.find("scheduler: openmpi") != std::string::npos);
  CHECK(text.find("note: OMPI_COMM_WORLD_LOCAL_SIZE=2") != std::string::npos);
  CHECK(text.find("also present, not used: pmix") != std::string::npos);

  env = load_env_fixture("slurm-srun-N2-n4-task0.env");
  detection = detect_scheduler(env);
  NodeOptions all;
  all.nnodes = NodeRange{2, 2};
  all.node_rank = 0;
  all.master_addr = "x";
  text = render_detection_report(detection, merge_node_settings(all, {}, detection));
  CHECK(text.find("refused: ddprun was started once per Slurm task") != std::string::npos);
}
