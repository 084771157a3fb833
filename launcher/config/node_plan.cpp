// SPDX-License-Identifier: MIT
#include "launcher/config/node_plan.hpp"

#include <fmt/format.h>

#include "launcher/common/usage_error.hpp"
#include "launcher/common/value_parsers.hpp"

namespace ddp::launcher {
std::string scheduler_choice(const RawOptions& raw) {
  return raw.standalone ? "none" : raw.scheduler;
}

Result<scheduler::SchedulerPlan> plan_launch_nodes(const RawOptions& raw,
                                                   const std::map<std::string, std::string>& env) {
  // Typed values are checked with the launcher's own parsers first, so their messages do not
  // depend on whether a scheduler is present.
  scheduler::NodeOptions typed;
  if (!raw.nnodes.empty()) {
    auto range = parse_node_range(raw.nnodes);
    if (!range) return range.error();
    typed.nnodes = scheduler::NodeRange{range->min, range->max};
  }
  if (!raw.node_rank.empty()) {
    auto rank = parse_integer("--node_rank", raw.node_rank, 0, 1'000'000);
    if (!rank) return rank.error();
    if (typed.nnodes && *rank >= typed.nnodes->max) {
      return usage_error(fmt::format("--node_rank: {} must be less than the number of nodes ({})",
                                     *rank, typed.nnodes->max));
    }
    typed.node_rank = static_cast<int>(*rank);
  }
  if (!raw.master_addr.empty()) typed.master_addr = raw.master_addr;
  if (!raw.master_port.empty()) {
    // 0: the store host binds a port the kernel picks and holds it (ddprun hosts the store).
    auto port = parse_integer("--master_port", raw.master_port, 0, 65535);
    if (!port) return port.error();
    typed.master_port = static_cast<int>(*port);
  }
  if (!raw.rdzv_id.empty()) typed.rdzv_id = raw.rdzv_id;
  try {
    return scheduler::plan_node_settings(env, typed, scheduler_choice(raw));
  } catch (const scheduler::SchedulerError& e) {
    return usage_error(e.what());
  }
}

Result<Ok> resolve_launch_master(scheduler::SchedulerPlan& plan) {
  try {
    scheduler::resolve_plan_master(plan);
  } catch (const scheduler::SchedulerError& e) {
    return usage_error(e.what());
  }
  return Ok{};
}

}  // namespace ddp::launcher
