// SPDX-License-Identifier: MIT
#pragma once
/// Routes small CPU all-reduces through a shared-memory segment when every rank of the job is on
/// this host (see shm_all_reduce.hpp); everything else (large tensors, broadcasts) goes to the
/// wrapped process-group communicator. Synchronous: the returned collective is already done.

#include <cstddef>
#include <memory>

#include "ddprun/worker/communicator.hpp"
#include "ddprun/worker/shm_all_reduce.hpp"

namespace ddp::worker {

/// Default per-rank slot: every SyncBatchNorm statistic and DDP's first (<= 1 MiB) bucket fit.
constexpr std::size_t kShmSlotBytes = std::size_t{1} << 20;

/// Whether the shared-memory path applies: more than one rank, all of them on this host by the
/// launcher's word (LOCAL_WORLD_SIZE set and equal to WORLD_SIZE), a CPU device, not disabled by
/// the option or DDPRUN_NO_SHM (any value but "" or "0").
bool shm_all_reduce_wanted(const WorkerEnv& env, bool option_enabled, bool cpu_device);

/// A readable segment tag from the job: TORCHELASTIC_RUN_ID (sanitised), restart count, port.
std::string shm_segment_tag(const WorkerEnv& env);

std::shared_ptr<Communicator> with_shm_all_reduce(std::shared_ptr<Communicator> inner,
                                                  std::unique_ptr<SharedMemoryAllReduce> shm);

}  // namespace ddp::worker
