#pragma once
/// Kubernetes: one ddprun per pod.

#include <optional>

#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

/// Indexed Job or JobSet: JOB_COMPLETION_INDEX (set by Kubernetes in every pod of an Indexed Job)
/// -> node_rank; MASTER_ADDR (the manifest sets it to the index-0 pod's DNS name) -> master_addr;
/// MASTER_PORT -> master_port; JOBSET_NAME or JOB_NAME -> job id. Kubernetes does not put the
/// completion count into the environment, so nnodes comes from --nnodes or PET_NNODES.
std::optional<SchedulerDefaults> detect_k8s_indexed(const Env& env);

/// Kubeflow PyTorchJob (training-operator v1): MASTER_ADDR + RANK + WORLD_SIZE, with no LOCAL_RANK
/// and no TORCHELASTIC_RUN_ID (those mean "inside a torchrun/ddprun worker", not a pod).
/// RANK is the pod index (master 0, worker i -> i+1) -> node_rank; WORLD_SIZE is the pod count
/// -> nnodes, except from operator 1.7 on (PET_NNODES is set), where WORLD_SIZE counts processes
/// and is ignored. MASTER_PORT -> master_port.
std::optional<SchedulerDefaults> detect_kubeflow(const Env& env);

}  // namespace ddp::launcher::scheduler
