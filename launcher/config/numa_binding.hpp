// SPDX-License-Identifier: MIT
#pragma once
/// --numa-binding: where each worker's CPUs and memory go, decided from the machine's topology.
/// Pure: the topology comes from read_numa_topology() (numa_topology.hpp).
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

#include <string>
#include <string_view>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/config/numa_topology.hpp"

namespace ddp::launcher {

struct NumaPlacement {
  int node = -1;          // the NUMA node chosen for the worker
  std::vector<int> cpus;  // its CPU affinity
  std::string reason;     // "GPU 3" or "spread": shown by --dry-run
};

/// One placement per local rank. `gpus`: the devices this node's workers use (LaunchConfig::gpus).
/// Error (exit 2) when the machine shows no NUMA topology or the mode cannot be applied.
Result<std::vector<NumaPlacement>> plan_numa_binding(std::string_view mode,
                                                     const NumaTopology& topo,
                                                     const std::vector<std::string>& gpus,
                                                     int nproc);

}  // namespace ddp::launcher
