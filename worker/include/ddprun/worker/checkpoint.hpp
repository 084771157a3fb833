// SPDX-License-Identifier: MIT
#pragma once
/// Training checkpoints in the seed's discipline, safe to restart from:
///  - rank 0 alone writes (model, optimizer state, epoch, step) inside a container that names
///    the job that wrote it (CheckpointIdentity) and carries a CRC-64 (checkpoint_file.hpp);
///    the write is atomic (temp file, fsync, rename) and any error (ENOSPC, EIO) is one
///    CheckpointError line with the temp file removed;
///  - on a start, rank 0 alone reads the file, decides (its own job's, intact: resume), tells
///    every rank through the store, and broadcasts the checkpoint's bytes to them: no shared
///    filesystem is needed, and every rank holds the same state before DDP's first broadcast.

#include <cstdint>
#include <optional>
#include <string>

#include "ddprun/worker/checkpoint_file.hpp"
#include "ddprun/worker/communicator.hpp"

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

/// "<n> tensors, <values> values, crc64 <hex>" over the names, dtypes and shapes of the
/// module's parameters and buffers: equal for the same architecture, whatever the weights.
std::string model_fingerprint(const torch::nn::Module& module);

/// Rank 0 writes `path` (first removing temp files that killed writers left next to it); all
/// ranks then meet in a barrier. Collective: call on every rank. Throws CheckpointError on a
/// write error (on rank 0; the others then fail in the barrier).
void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, TrainingProgress progress,
                     const CheckpointIdentity& identity, Communicator& communicator);

struct ResumeOutcome {
  bool resumed = false;
  TrainingProgress progress;  ///< Where training continues (zeros when not resumed).
  std::string note;           ///< One line for the user when a file was ignored; may be empty.
};

/// Collective; call on every rank after building model and optimizer and before wrapping the
/// model in DistributedDataParallel. Rank 0 applies plan_resume to the file at `path` (its
/// copy only: other ranks' filesystems are not consulted); when it resumes, every rank loads
/// the same bytes. Throws CheckpointError (same line on every rank) when the plan is Fail: a
/// corrupt or unreadable file, or --resume with another job's checkpoint.
ResumeOutcome resume_from_checkpoint(const std::string& path, torch::nn::Module& module,
                                     torch::optim::Optimizer& optimizer,
                                     const CheckpointIdentity& identity, ResumePolicy policy,
                                     int restart_count, Communicator& communicator);

/// Loads `path` into module and optimizer on this rank alone, whatever job wrote it;
/// std::nullopt when there is no file. Throws CheckpointError when the file is corrupt (its
/// checksum fails) and c10::Error when it does not fit the model.
std::optional<TrainingProgress> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer);

}  // namespace ddp::worker
