#pragma once
/// One-call entry point for ddprun's option handling: detect, merge, and (optionally) resolve.
///
///   auto plan = plan_node_settings(current_environment(), flags, options.scheduler);
///   if (plan.settings.master_addr) resolve_plan_master(plan);      // DNS, then Slurm NodeAddr
///   if (options.print_env_detect) std::cout << render_detection_report(plan.detection,
///                                                                     plan.settings, plan.master);

#include <optional>
#include <string_view>

#include "launcher/scheduler/detection.hpp"
#include "launcher/scheduler/merge.hpp"
#include "launcher/scheduler/resolve_master.hpp"
#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

struct SchedulerPlan {
  Detection detection;
  NodeSettings settings;
  std::optional<HostResolution> master;  ///< set by resolve_plan_master
};

/// Pure: detect_scheduler(env, choice), then merge_node_settings(flags, PET_* read from env, ...).
/// Throws SchedulerError (one line) on contradictions, refusals and malformed variables.
SchedulerPlan plan_node_settings(const Env& env, const NodeOptions& flags,
                                 std::string_view choice = "auto");

/// I/O: resolves plan.settings.master_addr into plan.master (no-op when it is unset). Slurm's
/// NodeAddr is consulted only when the name came from the scheduler. Throws SchedulerError.
void resolve_plan_master(SchedulerPlan& plan, ResolveOptions options = {});

/// The process's own environment as an Env (reads environ).
Env current_environment();

}  // namespace ddp::launcher::scheduler
