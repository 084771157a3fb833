// SPDX-License-Identifier: MIT
#pragma once
/// --numa-binding: where each worker's CPUs and memory go, decided from the machine's topology.
/// read_numa_topology() reads sysfs (I/O); plan_numa_binding() is pure.
///
/// A worker's NUMA node is its GPU's (CUDA index = position in PCI bus order, which is CUDA's
/// order for identical GPUs), or, without a GPU for it, node (local_rank mod number of nodes)
/// among the nodes that have CPUs. Modes, as torchrun's:
///   node          every CPU of that node
///   socket        every CPU of the node's socket (physical package)
///   exclusive     the node's CPUs split into disjoint equal slices among its workers
///   core-complex  one L3-sharing group (core complex) of the node per worker, round robin
/// Memory: the node is the worker's preferred node (MPOL_PREFERRED: allocations go there while
/// it has room, never an OOM because of the binding).

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/common/result.hpp"

namespace ddp::launcher {

struct NumaTopology {
  std::map<int, std::vector<int>> node_cpus;  // NUMA node → its online CPUs (ascending)
  std::map<int, int> cpu_package;             // CPU → physical package (socket), when known
  std::map<int, std::vector<int>> cpu_l3;     // CPU → CPUs sharing its L3 cache, when known
  std::vector<int> gpu_nodes;                 // NVIDIA GPUs in PCI bus order → NUMA node (-1 unknown)
};

/// Reads /sys/devices/system/{node,cpu} and the NVIDIA GPUs' PCI numa_node under `root`.
NumaTopology read_numa_topology(const std::filesystem::path& root = "/");

struct NumaPlacement {
  int node = -1;          // the NUMA node chosen for the worker
  std::vector<int> cpus;  // its CPU affinity
  std::string reason;     // "GPU 3" or "spread": shown by --dry-run
};

/// One placement per local rank. `gpus`: the devices this node's workers use (LaunchConfig::gpus).
/// Error (exit 2) when the machine shows no NUMA topology or the mode cannot be applied.
Result<std::vector<NumaPlacement>> plan_numa_binding(std::string_view mode, const NumaTopology& topo,
                                                     const std::vector<std::string>& gpus, int nproc);

/// "0-3,8" for {0,1,2,3,8}.
std::string format_cpu_list(const std::vector<int>& cpus);
/// Parses sysfs' "0-3,8" lists; malformed parts are skipped.
std::vector<int> parse_cpu_list(std::string_view text);

}  // namespace ddp::launcher
