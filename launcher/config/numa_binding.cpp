// SPDX-License-Identifier: MIT
#include "launcher/config/numa_binding.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "launcher/common/usage_error.hpp"

namespace ddp::launcher {
namespace {
// The NUMA node of a GPU given by its index, when the topology knows it and it has CPUs; -1
// otherwise (a UUID or an unknown index).
int gpu_numa_node(const NumaTopology& topo, const std::string& gpu) {
  int index = -1;
  auto [end, ec] = std::from_chars(gpu.data(), gpu.data() + gpu.size(), index);
  const bool numeric = ec == std::errc() && end == gpu.data() + gpu.size();
  if (numeric && index >= 0 && index < static_cast<int>(topo.gpu_nodes.size()) &&
      topo.gpu_nodes[index] >= 0 && topo.node_cpus.count(topo.gpu_nodes[index]) &&
      !topo.node_cpus.at(topo.gpu_nodes[index]).empty()) {
    return topo.gpu_nodes[index];
  }
  return -1;
}
}  // namespace

Result<std::vector<NumaPlacement>> plan_numa_binding(std::string_view mode,
                                                     const NumaTopology& topo,
                                                     const std::vector<std::string>& gpus,
                                                     int nproc) {
  std::vector<int> cpu_nodes;  // nodes that have CPUs
  for (const auto& [node, cpus] : topo.node_cpus) {
    if (!cpus.empty()) cpu_nodes.push_back(node);
  }
  if (cpu_nodes.empty()) {
    return usage_error(
        fmt::format("--numa-binding {}: this machine shows no NUMA nodes with CPUs "
                    "(/sys/devices/system/node)",
                    mode));
  }
  std::vector<NumaPlacement> out(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    auto& p = out[r];
    if (r < static_cast<int>(gpus.size())) {
      if (const int node = gpu_numa_node(topo, gpus[r]); node >= 0) {
        p.node = node;
        p.reason = fmt::format("GPU {}", gpus[r]);
      }
    }
    if (p.node < 0) {
      p.node = cpu_nodes[r % cpu_nodes.size()];
      p.reason = "spread";
    }
  }
  for (int r = 0; r < nproc; ++r) {
    auto& p = out[r];
    const auto& node_cpus = topo.node_cpus.at(p.node);
    // This worker's position among the workers placed on the same node.
    int slot = 0, sharing = 0;
    for (int q = 0; q < nproc; ++q) {
      if (out[q].node != p.node) continue;
      if (q < r) ++slot;
      ++sharing;
    }
    if (mode == "node") {
      p.cpus = node_cpus;
    } else if (mode == "socket") {
      auto package = topo.cpu_package.find(node_cpus.front());
      if (package == topo.cpu_package.end()) {
        p.cpus = node_cpus;  // no package information: the node is the best known socket
      } else {
        for (const auto& [cpu, pkg] : topo.cpu_package) {
          if (pkg == package->second) p.cpus.push_back(cpu);
        }
      }
    } else if (mode == "exclusive") {
      const int n = static_cast<int>(node_cpus.size());
      if (sharing > n) {
        return usage_error(
            fmt::format("--numa-binding exclusive: {} workers on NUMA node {} but it has "
                        "only {} CPU(s)",
                        sharing, p.node, n));
      }
      const int begin = slot * n / sharing, end = (slot + 1) * n / sharing;
      p.cpus.assign(node_cpus.begin() + begin, node_cpus.begin() + end);
    } else if (mode == "core-complex") {
      std::vector<std::vector<int>> complexes;
      for (int cpu : node_cpus) {
        auto l3 = topo.cpu_l3.find(cpu);
        std::vector<int> group = l3 == topo.cpu_l3.end() ? node_cpus : l3->second;
        if (std::find(complexes.begin(), complexes.end(), group) == complexes.end()) {
          complexes.push_back(group);
        }
      }
      p.cpus = complexes[slot % complexes.size()];
    } else {
      return usage_error(
          fmt::format("--numa-binding: '{}' is not one of node, socket, exclusive, "
                      "core-complex",
                      mode));
    }
  }
  return out;
}

}  // namespace ddp::launcher
