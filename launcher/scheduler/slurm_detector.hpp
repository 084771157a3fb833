#pragma once
/// Slurm: one ddprun per node, started by `srun --ntasks-per-node=1` (directly or inside sbatch).

#include <optional>

#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

/// Detects a Slurm job by SLURM_JOB_ID (or the older SLURM_JOBID) and reads, preferring the
/// step's own variables over the job's (a step may use fewer nodes than the allocation):
///   nnodes      SLURM_STEP_NUM_NODES, SLURM_NNODES, SLURM_JOB_NUM_NODES
///   node_rank   SLURM_NODEID
///   master_addr first host of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST
///   master_port port_from_job_id(SLURM_JOB_ID), so two jobs sharing a node do not collide
///   job_id      SLURM_JOB_ID (the default --rdzv_id)
/// Sets `refusal` when ddprun runs once per task (SLURM_STEP_NUM_TASKS/SLURM_NTASKS greater than
/// the node count), in the batch script of a multi-node job (no SLURM_STEP_ID: only the first node
/// runs it), or in a salloc shell on the submit host (no SLURM_NODEID).
/// Returns nullopt when no Slurm job id is set; throws SchedulerError on malformed values.
std::optional<SchedulerDefaults> detect_slurm(const Env& env);

}  // namespace ddp::launcher::scheduler
