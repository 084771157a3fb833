#include "launcher/scheduler/mpi_detectors.hpp"

#include <fmt/format.h>

#include "launcher/scheduler/env_values.hpp"
#include "launcher/scheduler/hostlist.hpp"

namespace ddp::launcher::scheduler {
namespace {

// MASTER_ADDR / MASTER_PORT that the user exported through the MPI launcher.
void take_user_master(const Env& env, SchedulerDefaults& out) {
  if (auto addr = env_first(env, {"MASTER_ADDR"})) out.master_addr = addr;
  if (auto port = env_int(env, {"MASTER_PORT"})) out.master_port = port;
}

// When every rank runs on this host, the master is this host.
void take_single_host_master(const std::optional<Sourced<int>>& local_size,
                             const std::optional<Sourced<int>>& size, SchedulerDefaults& out) {
  if (out.master_addr || !local_size || !size || local_size->value != size->value) return;
  out.master_addr = Sourced<std::string>{"127.0.0.1", local_size->origin, local_size->raw,
                                         fmt::format("all {} ranks run on this host", size->value)};
}

void note_shared_host(const std::optional<Sourced<int>>& local_size, SchedulerDefaults& out,
                      std::string_view one_per_node_hint) {
  if (!local_size || local_size->value <= 1) return;
  out.notes.push_back(fmt::format(
      "{}={}: {} ddprun processes share this host, each with its own node rank and its own "
      "--nproc_per_node workers; on a real cluster start one per node ({})",
      local_size->origin, local_size->raw, local_size->value, one_per_node_hint));
}

// The common start of an MPI detector: rank (the trigger) -> node_rank, size -> nnodes.
std::optional<SchedulerDefaults> rank_and_size(const Env& env, const char* scheduler,
                                               const char* rank_var, const char* size_var,
                                               std::string_view label) {
  auto rank = env_int(env, {rank_var});
  if (!rank) return std::nullopt;
  SchedulerDefaults out;
  out.scheduler = scheduler;
  out.trigger = rank_var;
  out.node_rank = rank;
  if (size_var != nullptr) {
    out.nnodes = env_int(env, {size_var});
    if (out.nnodes) require_rank_below(*rank, *out.nnodes, label);
  }
  return out;
}

void derive_port(SchedulerDefaults& out) {
  if (out.master_port || !out.job_id) return;
  out.master_port = Sourced<int>{port_from_job_id(out.job_id->value), out.job_id->origin,
                                 out.job_id->raw, port_derivation(out.job_id->value)};
}

}  // namespace

std::optional<SchedulerDefaults> detect_openmpi(const Env& env) {
  auto found =
      rank_and_size(env, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI");
  if (!found) return std::nullopt;
  SchedulerDefaults& out = *found;
  out.job_id = env_first(env, {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"});
  auto local_size = env_int(env, {"OMPI_COMM_WORLD_LOCAL_SIZE"});
  take_user_master(env, out);
  take_single_host_master(local_size, out.nnodes, out);
  if (!out.master_addr) {
    if (auto nodelist = env_first(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
      out.master_addr = Sourced<std::string>{
          first_host(nodelist->value), nodelist->origin, nodelist->raw,
          "first host of the Slurm allocation, where mpirun's default mapping puts rank 0"};
    } else {
      out.notes.push_back(
          "Open MPI publishes no master address: pass --master_addr=<host of rank 0> or "
          "`mpirun -x MASTER_ADDR=<host>`");
    }
  }
  derive_port(out);
  note_shared_host(local_size, out, "mpirun --map-by ppr:1:node");
  return found;
}

std::optional<SchedulerDefaults> detect_pmix(const Env& env) {
  auto found = rank_and_size(env, "pmix", "PMIX_RANK", nullptr, "PMIx");
  if (!found) return std::nullopt;
  SchedulerDefaults& out = *found;
  out.job_id = env_first(env, {"PMIX_NAMESPACE"});
  take_user_master(env, out);
  derive_port(out);
  out.notes.push_back("PMIx puts no job size in the environment: pass --nnodes");
  if (!out.master_addr) {
    out.notes.push_back("PMIx publishes no master address: pass --master_addr or set MASTER_ADDR");
  }
  return found;
}

std::optional<SchedulerDefaults> detect_pmi(const Env& env) {
  auto found = rank_and_size(env, "pmi", "PMI_RANK", "PMI_SIZE", "PMI");
  if (!found) return std::nullopt;
  SchedulerDefaults& out = *found;
  out.job_id = env_first(env, {"PMI_JOBID", "PMIX_NAMESPACE"});
  auto local_size = env_int(env, {"MPI_LOCALNRANKS"});
  take_user_master(env, out);
  take_single_host_master(local_size, out.nnodes, out);
  if (!out.master_addr) {
    out.notes.push_back("PMI publishes no master address: pass --master_addr or set MASTER_ADDR");
  }
  derive_port(out);
  note_shared_host(local_size, out, "mpiexec -ppn 1");
  return found;
}

}  // namespace ddp::launcher::scheduler
