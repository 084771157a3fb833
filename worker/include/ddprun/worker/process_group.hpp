// SPDX-License-Identifier: MIT
#pragma once
/// The c10d process group behind a Communicator, for collectives this library does not wrap
/// (send/recv, gather, alltoall...). Its type differs between LibTorch versions: 1.13's groups
/// are c10d::ProcessGroup, 2.x's are c10d::Backend; ProcessGroupHandle names whichever this
/// LibTorch has, so code written against it compiles with both.
/// Calls on it are collective like the Communicator's and must keep the same order on every
/// rank, interleaved with the Communicator's own calls.

#include <torch/version.h>

#include <any>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include "ddprun/worker/communicator.hpp"

namespace ddp::worker {

#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupHandle = c10::intrusive_ptr<c10d::Backend>;
#else
using ProcessGroupHandle = c10::intrusive_ptr<c10d::ProcessGroup>;
#endif

/// The ProcessGroupGloo or ProcessGroupNCCL `communicator` runs on (for a shared-memory
/// communicator, the Gloo group beneath it); a null handle in the one-process world.
inline ProcessGroupHandle process_group(const Communicator& communicator) {
  const std::any group = communicator.native_process_group();
  if (!group.has_value()) return ProcessGroupHandle();
  return std::any_cast<ProcessGroupHandle>(group);
}

}  // namespace ddp::worker
