#include "launcher/scheduler/plan.hpp"

extern char** environ;

namespace ddp::launcher::scheduler {

SchedulerPlan plan_node_settings(const Env& env, const NodeOptions& flags,
                                 std::string_view choice) {
  SchedulerPlan plan;
  plan.detection = detect_scheduler(env, choice);
  plan.settings = merge_node_settings(flags, pet_options_from_env(env), plan.detection);
  return plan;
}

void resolve_plan_master(SchedulerPlan& plan, ResolveOptions options) {
  if (!plan.settings.master_addr) return;
  // A name from the scheduler may be a Slurm node name (also under mpirun inside an allocation);
  // a name the user typed is taken as a network name.
  options.ask_slurm = options.ask_slurm && plan.settings.master_from_scheduler();
  plan.master = resolve_master_host(plan.settings.master_addr->value, options);
}

Env current_environment() {
  Env env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    auto eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

}  // namespace ddp::launcher::scheduler
