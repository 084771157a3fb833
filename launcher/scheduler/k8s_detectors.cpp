#include "launcher/scheduler/k8s_detectors.hpp"

#include <fmt/format.h>

#include "launcher/scheduler/env_values.hpp"

namespace ddp::launcher::scheduler {

std::optional<SchedulerDefaults> detect_k8s_indexed(const Env& env) {
  auto index = env_int(env, {"JOB_COMPLETION_INDEX"});
  if (!index) return std::nullopt;
  SchedulerDefaults out;
  out.scheduler = "k8s-indexed";
  out.trigger = "JOB_COMPLETION_INDEX";
  out.node_rank = index;
  out.master_addr = env_first(env, {"MASTER_ADDR"});
  out.master_port = env_int(env, {"MASTER_PORT"});
  out.job_id = env_first(env, {"JOBSET_NAME", "JOB_NAME"});
  if (!out.master_addr) {
    out.notes.push_back(
        "set MASTER_ADDR in the manifest to the index-0 pod's DNS name "
        "(<job>-0.<headless service>, or <jobset>-<replicated job>-0-0.<jobset> for a JobSet)");
  }
  out.notes.push_back(
      "Kubernetes does not export the completion count: pass --nnodes or set PET_NNODES");
  return out;
}

std::optional<SchedulerDefaults> detect_kubeflow(const Env& env) {
  if (!env.contains("MASTER_ADDR") || !env.contains("RANK") || !env.contains("WORLD_SIZE") ||
      env.contains("LOCAL_RANK") || env.contains("TORCHELASTIC_RUN_ID")) {
    return std::nullopt;
  }
  SchedulerDefaults out;
  out.scheduler = "kubeflow";
  out.trigger = "MASTER_ADDR+RANK+WORLD_SIZE";
  out.node_rank = env_int(env, {"RANK"});
  auto world = env_int(env, {"WORLD_SIZE"});
  if (env.contains("PET_NNODES")) {
    out.notes.push_back(fmt::format(
        "WORLD_SIZE={} counts processes (training-operator >= 1.7 sets PET_NNODES): not used as "
        "the node count",
        world->raw));
  } else {
    require_rank_below(*out.node_rank, *world, "Kubeflow");
    out.nnodes = world;
    out.nnodes->how = "number of pods (training-operator v1 before 1.7)";
  }
  out.master_addr = env_first(env, {"MASTER_ADDR"});
  out.master_port = env_int(env, {"MASTER_PORT"});
  return out;
}

}  // namespace ddp::launcher::scheduler
