// SPDX-License-Identifier: MIT
#pragma once
/// The worker program's training job: the seed's DDP workflow in C++ (process group from the
/// launcher's environment, CNN with SyncBatchNorm wrapped in DistributedDataParallel,
/// DistributedSampler with set_epoch, rank-0 checkpoints, resume after a restart).

#include <cstdint>
#include <string>

#include "ddprun/worker/worker_env.hpp"

namespace ddp::examples {

struct TrainOptions {
  int64_t epochs = 2;
  int64_t batch_size = 64;  ///< Per rank.
  double lr = 0.05;
  double momentum = 0.9;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint = "checkpoints/worker.pt";
  /// "auto": resume on a launcher restart from this job's own checkpoint; "always" (--resume):
  /// on every start, from any run with the same world size, data and model; "never" (--no-resume).
  std::string resume = "auto";
  uint64_t seed = 0;
  std::string backend = "auto";
  int64_t synthetic = 0;   ///< > 0: train on this many generated images instead.
  double timeout_s = 120;  ///< Bound on every collective and store operation.
  int threads = 0;         ///< Intra-op threads per rank; 0: OMP_NUM_THREADS or cores/ranks.
  int64_t bucket_kb = 25L * 1024;  ///< DDP bucket cap (the first bucket is min(this, 1 MiB)).
  int64_t max_steps = 0;           ///< > 0: stop each epoch after this many steps (benchmarks).
  int64_t log_every = 100;         ///< Plain-line progress interval (non-TTY).
  std::string dump_params;         ///< Each rank writes its final parameters to <this>.rank<R>.
  std::string summary_json;        ///< Rank 0 writes throughput/accuracy/overlap here.
  int64_t fail_after_epoch = -1;   ///< Tests: the last rank SIGKILLs itself after this epoch's
                                   ///< checkpoint (first attempt only).
  bool evaluate = true;
  bool sync_batch_norm = true;  ///< Convert BatchNorm to SyncBatchNorm (the seed's setup).
  bool shared_memory =
      true;  ///< Small CPU all-reduces through shared memory when all ranks are local.
  bool channels_last = false;  ///< NHWC weights and activations (measured: no gain here).
};

/// Runs the job; returns the process exit code. Throws on errors (reported by main).
int train(const TrainOptions& options, const ddp::worker::WorkerEnv& env);

}  // namespace ddp::examples
