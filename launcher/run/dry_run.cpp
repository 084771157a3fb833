// SPDX-License-Identifier: MIT
#include "launcher/run/dry_run.hpp"

#include "launcher/run/run_directory.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "rendezvous/json_text.hpp"

namespace ddp::launcher {

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-+=/.,:@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string format_dry_run(const LaunchConfig& config, const std::vector<std::string>& argv,
                           const EnvMap& parent, int master_port, bool as_json) {
  std::string out;
  std::string base = config.log_dir.empty() ? "<temporary dir>" : config.log_dir;
  for (int r = 0; r < config.nproc_per_node; ++r) {
    WorkerSlot slot{r, 0, master_port,
                    fmt::format("{}/{}_<unique>/attempt_0/{}/error.json", base,
                                run_dir_name(config.run_id), r)};
    EnvMap env = worker_env_additions(config, slot, parent);
    const NumaPlacement* numa =
        r < static_cast<int>(config.numa_placements.size()) ? &config.numa_placements[r] : nullptr;
    if (as_json) {
      nlohmann::json j{{"event", "dry_run"},
                       {"rank", global_rank(config, r)},
                       {"local_rank", r},
                       {"argv", argv},
                       {"env", env}};
      if (numa) {
        j["numa"] = {{"node", numa->node},
                     {"cpus", format_cpu_list(numa->cpus)},
                     {"memory", "preferred"},
                     {"why", numa->reason}};
      }
      out += dump_json(j) + "\n";
      continue;
    }
    std::string command;
    for (const auto& a : argv) {
      if (!command.empty()) command += ' ';
      command += shell_quote(a);
    }
    out += fmt::format("rank {} (local_rank {}): {}\n", global_rank(config, r), r, command);
    if (numa) {
      out +=
          fmt::format("    numa-binding {}: cpus {}, memory preferred on node {} ({})\n",
                      config.numa_binding, format_cpu_list(numa->cpus), numa->node, numa->reason);
    }
    for (const auto& [name, value] : env)
      out += fmt::format("    {}={}\n", name, shell_quote(value));
  }
  return out;
}

}  // namespace ddp::launcher
