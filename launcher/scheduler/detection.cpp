#include "launcher/scheduler/detection.hpp"

#include <fmt/format.h>

#include <array>

#include "launcher/scheduler/k8s_detectors.hpp"
#include "launcher/scheduler/mpi_detectors.hpp"
#include "launcher/scheduler/slurm_detector.hpp"

namespace ddp::launcher::scheduler {
namespace {

constexpr std::array kOrder = {
    DetectorInfo{"openmpi", "OMPI_COMM_WORLD_RANK",
                 "mpirun inside a Slurm allocation also carries the orted step's SLURM_* variables",
                 &detect_openmpi},
    DetectorInfo{"slurm", "SLURM_JOB_ID", "the richest environment of the HPC schedulers",
                 &detect_slurm},
    DetectorInfo{"pmix", "PMIX_RANK", "srun --mpi=pmix sets PMIX_RANK next to SLURM_*",
                 &detect_pmix},
    DetectorInfo{"pmi", "PMI_RANK", "MPICH Hydra, Intel MPI, Cray PALS", &detect_pmi},
    DetectorInfo{"k8s-indexed", "JOB_COMPLETION_INDEX", "Kubernetes Indexed Job or JobSet",
                 &detect_k8s_indexed},
    DetectorInfo{"kubeflow", "MASTER_ADDR+RANK+WORLD_SIZE (no LOCAL_RANK)",
                 "the least specific trigger, so it is tried last", &detect_kubeflow},
};

std::string valid_names() {
  std::string names = "auto, none";
  for (const auto& info : kOrder) names += fmt::format(", {}", info.name);
  return names;
}

}  // namespace

std::span<const DetectorInfo> detection_order() { return kOrder; }

Detection detect_scheduler(const Env& env, std::string_view choice) {
  Detection out;
  out.choice = std::string(choice);
  if (choice == "none") return out;
  if (choice == "auto") {
    for (const auto& info : kOrder) {
      if (out.defaults) {
        // Only listed in the report; a malformed value in an unused environment is not fatal.
        try {
          if (info.detect(env)) out.also_present.emplace_back(info.name);
        } catch (const SchedulerError& e) {
          out.also_present.push_back(
              fmt::format("{} (malformed, ignored: {})", info.name, e.what()));
        }
        continue;
      }
      out.defaults = info.detect(env);
    }
    return out;
  }
  for (const auto& info : kOrder) {
    if (info.name != choice) continue;
    out.defaults = info.detect(env);
    if (!out.defaults) {
      throw SchedulerError(
          fmt::format("--scheduler={} but {} is not set in the environment", choice, info.trigger));
    }
    return out;
  }
  throw SchedulerError(
      fmt::format("--scheduler={} is not a known scheduler (valid: {})", choice, valid_names()));
}

}  // namespace ddp::launcher::scheduler
