// SPDX-License-Identifier: MIT
#pragma once
/// The machine's NUMA topology as sysfs shows it (I/O), for --numa-binding (numa_binding.hpp).

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

struct NumaTopology {
  std::map<int, std::vector<int>> node_cpus;  // NUMA node → its online CPUs (ascending)
  std::map<int, int> cpu_package;             // CPU → physical package (socket), when known
  std::map<int, std::vector<int>> cpu_l3;     // CPU → CPUs sharing its L3 cache, when known
  std::vector<int> gpu_nodes;  // NVIDIA GPUs in PCI bus order → NUMA node (-1 unknown)
};

/// Reads /sys/devices/system/{node,cpu} and the NVIDIA GPUs' PCI numa_node under `root`.
NumaTopology read_numa_topology(const std::filesystem::path& root = "/");

/// "0-3,8" for {0,1,2,3,8}.
std::string format_cpu_list(const std::vector<int>& cpus);
/// Parses sysfs' "0-3,8" lists; malformed parts are skipped.
std::vector<int> parse_cpu_list(std::string_view text);

}  // namespace ddp::launcher
