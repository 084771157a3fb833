#pragma once
/// Precedence of the node-level launch values: command-line flags > PET_* variables > scheduler.
///
/// Flags override PET_* silently (torchrun's contract: PET_* are defaults for flags). An explicit
/// value (flag or PET_*) that contradicts the scheduler's node count or node rank is an error
/// naming both sources; an explicit master address, port or rendezvous id simply wins (a cluster
/// may want another interface's name or another port) and the report shows what it replaced.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/scheduler/detection.hpp"
#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

/// Values given explicitly in one layer (flags or PET_*); nullopt = not given there.
struct NodeOptions {
  std::optional<NodeRange> nnodes;
  std::optional<int> node_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> rdzv_id;
};

/// Parses "N" or "MIN:MAX" (torchrun's --nnodes); throws SchedulerError naming `what`.
NodeRange parse_node_range(std::string_view text, std::string_view what);

/// Reads PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_RDZV_ID.
/// Throws SchedulerError naming the variable when one is malformed.
NodeOptions pet_options_from_env(const Env& env);

/// The merged values, each with its origin. Absent: no layer gave it (ddprun's own defaults apply:
/// nnodes 1, node_rank 0, master 127.0.0.1, port 29500 or free, rdzv id "none").
struct NodeSettings {
  std::string scheduler;  ///< the detector whose values were considered; empty if none
  std::optional<Sourced<NodeRange>> nnodes;
  std::optional<Sourced<int>> node_rank;
  std::optional<Sourced<std::string>> master_addr;
  std::optional<Sourced<int>> master_port;
  std::optional<Sourced<std::string>> rdzv_id;
  std::vector<std::string> notes;  ///< overrides ("--master_port=1 overrides SLURM_JOB_ID ...")

  /// True when master_addr came from the scheduler and is a host *name* to resolve (Slurm node
  /// names may not be DNS names: resolve_master_host falls back to Slurm's NodeAddr).
  bool master_from_scheduler() const;
};

/// Applies the precedence. Throws SchedulerError when
///  - an explicit nnodes range excludes the scheduler's node count,
///  - an explicit node_rank differs from the scheduler's node rank,
///  - the resulting node_rank is not below the resulting node count (both sources named),
///  - the scheduler refused its environment (SchedulerDefaults::refusal) and one of its values
///    would be used.
NodeSettings merge_node_settings(const NodeOptions& flags, const NodeOptions& pet,
                                 const Detection& detection);

/// "SLURM_NODEID=1", "--node_rank=3", "SLURM_JOB_ID=1234 (15000 + job id modulo 17768)".
std::string describe_origin(std::string_view origin, std::string_view raw, std::string_view how);

template <typename T>
std::string describe_origin(const Sourced<T>& value) {
  return describe_origin(value.origin, value.raw, value.how);
}

/// "2" or "1:4".
std::string to_string(const NodeRange& range);

/// A value as text, for reports and messages.
inline std::string value_text(const std::string& v) { return v; }
inline std::string value_text(int v) { return std::to_string(v); }
inline std::string value_text(const NodeRange& v) { return to_string(v); }

}  // namespace ddp::launcher::scheduler
