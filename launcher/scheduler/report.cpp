#include "launcher/scheduler/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace ddp::launcher::scheduler {
namespace {

template <typename T>
void row(std::string& out, std::string_view name, const std::optional<Sourced<T>>& value,
         std::string_view unset) {
  if (value) {
    out += fmt::format("  {:<12} {:<16} from {}\n", name, value_text(value->value),
                       describe_origin(*value));
  } else {
    out += fmt::format("  {:<12} {:<16} {}\n", name, "-", unset);
  }
}

std::string order_names() {
  std::string names;
  for (const auto& info : detection_order()) {
    names += names.empty() ? "" : ", ";
    names += info.name;
  }
  return names;
}

}  // namespace

std::string render_detection_report(const Detection& detection, const NodeSettings& settings,
                                    const std::optional<HostResolution>& master) {
  std::string out = fmt::format("scheduler detection (--scheduler={}; order: {})\n",
                                detection.choice, order_names());
  if (!detection.defaults) {
    if (detection.choice == "none") {
      out += "scheduler: none (detection disabled)\n";
    } else {
      std::string triggers;
      for (const auto& info : detection_order()) {
        triggers += fmt::format("{}{}", triggers.empty() ? "" : ", ", info.trigger);
      }
      out += fmt::format("scheduler: none detected (none of {} is set)\n", triggers);
    }
  } else {
    const SchedulerDefaults& d = *detection.defaults;
    out += fmt::format("scheduler: {} (selected by {})\n", d.scheduler, d.trigger);
    row(out, "nnodes", d.nnodes, "not provided");
    row(out, "node_rank", d.node_rank, "not provided");
    row(out, "master_addr", d.master_addr, "not provided");
    row(out, "master_port", d.master_port, "not provided");
    row(out, "job_id", d.job_id, "not provided");
    for (const auto& note : d.notes) out += fmt::format("  note: {}\n", note);
    if (d.refusal) out += fmt::format("  refused: {}\n", *d.refusal);
  }
  for (const auto& name : detection.also_present) {
    out += fmt::format("also present, not used: {}\n", name);
  }
  out += "effective values (flags > PET_* > scheduler; '-' = ddprun's default):\n";
  row(out, "nnodes", settings.nnodes, "default 1");
  row(out, "node_rank", settings.node_rank, "default 0");
  row(out, "master_addr", settings.master_addr, "default 127.0.0.1");
  if (master) {
    out += fmt::format("  {:<12} {:<16} {} resolved by {}\n", "", master->address, master->host,
                       master->how);
  }
  const bool one_node = !settings.nnodes || settings.nnodes->value.max == 1;
  row(out, "master_port", settings.master_port,
      one_node ? "default: a free port (one node)" : "default 29500");
  row(out, "rdzv_id", settings.rdzv_id, "default none");
  const bool scheduler_port = settings.master_port &&
                              settings.master_port->origin.rfind("--", 0) != 0 &&
                              settings.master_port->origin.rfind("PET_", 0) != 0;
  if (one_node && (settings.master_from_scheduler() || scheduler_port)) {
    out +=
        "  note: one node: ddprun ignores the scheduler's master host and port and uses "
        "127.0.0.1 and a free port (so two steps on one node cannot collide)\n";
  }
  for (const auto& note : settings.notes) out += fmt::format("  note: {}\n", note);
  return out;
}

std::string render_found_variables(const Env& env) {
  // What the detectors read: the schedulers' own families and the launcher variables.
  static constexpr std::string_view kPrefixes[] = {
      "SLURM_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_", "MPI_LOCAL", "JOB", "PET_"};
  static constexpr std::string_view kNames[] = {
      "PMI",        "MASTER_ADDR", "MASTER_PORT",        "RANK",
      "WORLD_SIZE", "LOCAL_RANK",  "TORCHELASTIC_RUN_ID"};
  std::string out;
  for (const auto& entry : env) {
    const auto& [name, value] = entry;
    const std::string_view key = entry.first;  // a lambda may not capture a structured binding
    const bool wanted = std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                                    [&](std::string_view p) { return key.starts_with(p); }) ||
                        std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
    if (wanted) out += fmt::format("  {}={}\n", name, value);
  }
  return out.empty() ? "scheduler variables found: none\n" : "scheduler variables found:\n" + out;
}

}  // namespace ddp::launcher::scheduler
