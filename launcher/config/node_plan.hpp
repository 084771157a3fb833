// SPDX-License-Identifier: MIT
#pragma once
/// The node-level values of a launch (nnodes, node_rank, master_addr, master_port, rdzv_id) from
/// three layers: typed flags > PET_* variables > the cluster scheduler's environment (Slurm, Open
/// MPI, PMIx/PMI, Kubernetes; launcher/scheduler/). Pure: the environment comes in as a map.

#include <map>
#include <string>

#include "launcher/common/result.hpp"
#include "launcher/config/raw_options.hpp"
#include "launcher/scheduler/plan.hpp"

namespace ddp::launcher {

/// The scheduler detector to use: `--scheduler` as typed, or "none" with --standalone.
std::string scheduler_choice(const RawOptions& raw);

/// Validates the five node options as typed (empty = not typed) with the launcher's own messages,
/// detects the scheduler in `env` and merges the layers. Errors (exit code 2) are one line and
/// name both sources when a flag or PET_* variable contradicts the scheduler.
Result<scheduler::SchedulerPlan> plan_launch_nodes(const RawOptions& raw,
                                                   const std::map<std::string, std::string>& env);

/// I/O: turns the master host name into an address (DNS, then Slurm's NodeAddr for a name that
/// came from the scheduler; at most a few seconds, never hangs). Sets plan.master.
Result<Ok> resolve_launch_master(scheduler::SchedulerPlan& plan);

}  // namespace ddp::launcher
