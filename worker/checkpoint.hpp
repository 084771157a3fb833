// SPDX-License-Identifier: MIT
#pragma once
/// Training checkpoints in the seed's discipline: rank 0 alone writes (model, optimizer state,
/// epoch, step), atomically: a temporary file in the same directory, fsync, then rename, so a
/// crash never leaves a torn checkpoint. Every rank can load it to resume.

#include <cstdint>
#include <optional>
#include <string>

#include "worker/communicator.hpp"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace ddp::worker {

struct TrainingProgress {
  int64_t epoch = 0;  ///< Epochs completed.
  int64_t step = 0;   ///< Optimizer steps taken.
};

/// Rank 0 writes `path`; all ranks then meet in a barrier so no rank reads a checkpoint before
/// it exists. Collective: call on every rank.
void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, TrainingProgress progress,
                     Communicator& communicator);

/// Loads `path` into module and optimizer on this rank; std::nullopt when there is no file.
/// Throws when the file exists but does not match the model.
std::optional<TrainingProgress> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer);

}  // namespace ddp::worker
