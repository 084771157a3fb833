#pragma once
/// The detection order: which scheduler's environment ddprun trusts when several are present.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

using DetectorFn = std::optional<SchedulerDefaults> (*)(const Env&);

/// One row of the detection order.
struct DetectorInfo {
  std::string_view name;      ///< value for --scheduler, e.g. "slurm"
  std::string_view trigger;   ///< the variable(s) whose presence selects it
  std::string_view why_here;  ///< why it sits at this position in the order
  DetectorFn detect;
};

/// The detectors in the order they are tried:
///   openmpi (before slurm: mpirun inside an allocation inherits the orted step's SLURM_* vars,
///   whose SLURM_NODEID/SLURM_PROCID do not describe the ranks), slurm, pmix (after slurm:
///   `srun --mpi=pmix` sets PMIX_RANK too, and Slurm's variables say more), pmi, k8s-indexed,
///   kubeflow (last: its trigger, MASTER_ADDR+RANK+WORLD_SIZE, is the least specific).
std::span<const DetectorInfo> detection_order();

/// The result of running the detectors.
struct Detection {
  std::string choice;                         ///< "auto", "none" or a detector name, as asked
  std::optional<SchedulerDefaults> defaults;  ///< the scheduler taken, if any
  std::vector<std::string> also_present;  ///< later detectors that matched too (shown, not used)
};

/// Runs the detectors. `choice` is "auto" (first match in detection_order()), "none" (ignore
/// every scheduler) or one detector's name (that detector only; SchedulerError if its variables
/// are absent). An unknown name is a SchedulerError listing the valid ones.
Detection detect_scheduler(const Env& env, std::string_view choice = "auto");

}  // namespace ddp::launcher::scheduler
