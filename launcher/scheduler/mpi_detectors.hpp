#pragma once
/// MPI launchers starting one ddprun per node: Open MPI's mpirun, PMIx launchers (PRRTE,
/// `srun --mpi=pmix` without Slurm variables), and PMI launchers (MPICH Hydra, Intel MPI, Cray
/// PALS).
///
/// None of them publishes a rendezvous address. The master address is taken, in this order, from
/// MASTER_ADDR (e.g. `mpirun -x MASTER_ADDR=host`), from "all ranks are on this host" (then the
/// master is 127.0.0.1), or, for Open MPI inside a Slurm allocation, from the allocation's first
/// host (mpirun's default mapping puts rank 0 there). Otherwise it stays unset and ddprun asks for
/// --master_addr.

#include <optional>

#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

/// OMPI_COMM_WORLD_RANK -> node_rank, OMPI_COMM_WORLD_SIZE -> nnodes, job id from
/// OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE, port from MASTER_PORT or the job id.
std::optional<SchedulerDefaults> detect_openmpi(const Env& env);

/// PMIX_RANK -> node_rank, PMIX_NAMESPACE -> job id. PMIx puts no job size in the environment,
/// so nnodes must come from --nnodes or PET_NNODES.
std::optional<SchedulerDefaults> detect_pmix(const Env& env);

/// PMI_RANK -> node_rank, PMI_SIZE -> nnodes, MPI_LOCALNRANKS for the one-host case.
std::optional<SchedulerDefaults> detect_pmi(const Env& env);

}  // namespace ddp::launcher::scheduler
