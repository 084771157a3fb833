// scheduler_probe: prints, as one JSON object, what ddp_scheduler detects in this process's real
// environment, so cluster tests can run it inside srun/sbatch/mpirun steps and assert the values.
//   scheduler_probe [--scheduler=NAME] [--resolve] [--report]
// --resolve also turns the effective master host into an address (DNS, then Slurm NodeAddr);
// --report prints the --print-env-detect text instead of JSON. Exit 0, or 2 on a detection error
// (the JSON then has "error").
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "launcher/scheduler/plan.hpp"
#include "launcher/scheduler/report.hpp"

using namespace ddp::launcher::scheduler;
using nlohmann::json;

namespace {

template <typename T>
json value_json(const std::optional<Sourced<T>>& v) {
  if (!v) return nullptr;
  json out = {{"origin", v->origin}, {"raw", v->raw}, {"how", v->how}};
  if constexpr (std::is_same_v<T, NodeRange>) {
    out["value"] = v->value.min == v->value.max ? json(v->value.min) : json(to_string(v->value));
  } else {
    out["value"] = v->value;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string choice = "auto";
  bool resolve = false;
  bool report = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--scheduler=", 0) == 0) {
      choice = arg.substr(12);
    } else if (arg == "--resolve") {
      resolve = true;
    } else if (arg == "--report") {
      report = true;
    } else {
      std::fprintf(stderr, "scheduler_probe: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  json out;
  int rc = 0;
  try {
    SchedulerPlan plan = plan_node_settings(current_environment(), {}, choice);
    const Detection& detection = plan.detection;
    const NodeSettings& settings = plan.settings;
    if (detection.defaults) {
      const auto& d = *detection.defaults;
      out["scheduler"] = d.scheduler;
      out["trigger"] = d.trigger;
      out["detected"] = {{"nnodes", value_json(d.nnodes)},
                         {"node_rank", value_json(d.node_rank)},
                         {"master_addr", value_json(d.master_addr)},
                         {"master_port", value_json(d.master_port)},
                         {"job_id", value_json(d.job_id)}};
      out["refusal"] = d.refusal ? json(*d.refusal) : json(nullptr);
      out["notes"] = d.notes;
    } else {
      out["scheduler"] = nullptr;
    }
    out["also_present"] = detection.also_present;
    out["effective"] = {{"nnodes", value_json(settings.nnodes)},
                        {"node_rank", value_json(settings.node_rank)},
                        {"master_addr", value_json(settings.master_addr)},
                        {"master_port", value_json(settings.master_port)},
                        {"rdzv_id", value_json(settings.rdzv_id)}};
    if (resolve && settings.master_addr) {
      resolve_plan_master(plan);
      out["master_resolution"] = {{"host", plan.master->host},
                                  {"address", plan.master->address},
                                  {"how", plan.master->how}};
    }
    if (report) {
      std::cout << render_detection_report(detection, settings, plan.master);
      return 0;
    }
  } catch (const SchedulerError& e) {
    out["error"] = e.what();
    rc = 2;
    if (report) {
      std::cerr << "scheduler_probe: " << e.what() << "\n";
      return rc;
    }
  }
  std::cout << out.dump() << "\n";
  return rc;
}
