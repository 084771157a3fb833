#include "launcher/scheduler/slurm_detector.hpp"

#include <fmt/format.h>

#include "launcher/scheduler/env_values.hpp"
#include "launcher/scheduler/hostlist.hpp"

namespace ddp::launcher::scheduler {
namespace {

constexpr const char* kUsage = "srun --ntasks-per-node=1 ddprun --nproc_per_node=N ...";

std::optional<std::string> refusal_for(const Env& env, const Sourced<int>& nnodes, bool in_step,
                                       bool has_node_id) {
  if (!has_node_id) {
    return fmt::format(
        "SLURM_JOB_ID is set but SLURM_NODEID is not: ddprun runs in a salloc shell on the submit "
        "host, not on an allocated node; start it on the nodes with `{}` (or pass "
        "--scheduler=none to ignore Slurm)",
        kUsage);
  }
  if (!in_step && nnodes.value > 1) {
    return fmt::format(
        "ddprun runs in the batch script of a {}-node Slurm job ({}={}, no SLURM_STEP_ID), which "
        "Slurm runs on the first node only; start one ddprun per node with `{}`",
        nnodes.value, nnodes.origin, nnodes.raw, kUsage);
  }
  if (!in_step) return std::nullopt;  // the batch script itself: its task count is the job's
  auto tasks = env_int(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  if (tasks && tasks->value > nnodes.value) {
    return fmt::format(
        "ddprun was started once per Slurm task ({}={} tasks on {}={} nodes), but it must run "
        "once per node and starts the workers itself; use `{}` (--ntasks-per-node=1)",
        tasks->origin, tasks->raw, nnodes.origin, nnodes.raw, kUsage);
  }
  return std::nullopt;
}

// SLURM_STEP_RESV_PORTS ("12000-12015", or a list such as "12000,12004-12005"; srun
// --resv-ports): the ports Slurm reserved for this step, the same on every node of the step and
// never handed to another running step. The first one is the store's.
Sourced<int> reserved_port(const std::string& raw) {
  const std::string first = raw.substr(0, raw.find_first_of(",-"));
  const int port = parse_count(first, "SLURM_STEP_RESV_PORTS");
  if (port < 1 || port > 65535) {
    throw SchedulerError(fmt::format("SLURM_STEP_RESV_PORTS={}: {} is not a port", raw, port));
  }
  return Sourced<int>{port, "SLURM_STEP_RESV_PORTS", raw, "first port Slurm reserved for the step"};
}

}  // namespace

std::optional<SchedulerDefaults> detect_slurm(const Env& env) {
  auto job_id = env_first(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job_id) return std::nullopt;

  SchedulerDefaults out;
  out.scheduler = "slurm";
  out.trigger = job_id->origin;
  out.job_id = *job_id;
  out.master_port = Sourced<int>{port_from_job_id(job_id->value), job_id->origin, job_id->raw,
                                 port_derivation(job_id->value)};

  const bool in_step = env.contains("SLURM_STEP_ID") || env.contains("SLURM_STEPID");
  if (auto reserved = env_first(env, {"SLURM_STEP_RESV_PORTS"}); reserved && in_step) {
    out.master_port = reserved_port(reserved->value);
  }
  auto nnodes = in_step
                    ? env_int(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"})
                    : env_int(env, {"SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  auto node_id = env_int(env, {"SLURM_NODEID"});
  auto nodelist =
      in_step ? env_first(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
              : env_first(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});

  if (!nnodes && nodelist) {
    // Old or trimmed environments: count the hosts instead.
    int count = static_cast<int>(expand_hostlist(nodelist->value).size());
    nnodes = Sourced<int>{count, nodelist->origin, nodelist->raw, "number of hosts in the list"};
  }
  if (!nnodes) {
    throw SchedulerError(fmt::format(
        "{}={} is set but neither SLURM_NNODES nor a node list is: cannot tell the node count",
        job_id->origin, job_id->raw));
  }
  out.nnodes = nnodes;
  if (node_id) {
    require_rank_below(*node_id, *nnodes, "Slurm");
    out.node_rank = node_id;
  }
  if (nodelist) {
    out.master_addr = Sourced<std::string>{first_host(nodelist->value), nodelist->origin,
                                           nodelist->raw, "first host of the list"};
  } else {
    out.notes.push_back("no SLURM_*NODELIST variable: Slurm gives no master host");
  }
  if (env.contains("SLURM_HET_SIZE")) {
    out.notes.push_back("heterogeneous job (SLURM_HET_SIZE): values are those of this component");
  }
  out.refusal = refusal_for(env, *nnodes, in_step, node_id.has_value());
  return out;
}

}  // namespace ddp::launcher::scheduler
