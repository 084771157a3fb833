// SPDX-License-Identifier: MIT
#pragma once
/// DistributedSampler: which dataset indices this rank visits in an epoch, index for index the
/// ones torch.utils.data.distributed.DistributedSampler yields for the same arguments:
/// torch.randperm under a generator seeded with seed + epoch (or 0..size-1 unshuffled), padded
/// by repeating from the start (or cut, with drop_last), then every num_replicas-th from rank.

#include <cstdint>
#include <vector>

namespace ddp::worker {

class DistributedSampler {
 public:
  /// Throws std::invalid_argument when rank is not in [0, num_replicas) or size < 0.
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  /// Reshuffles for the epoch: call at the start of each epoch, as in PyTorch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;
  /// Indices per rank per epoch (PyTorch's num_samples).
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace ddp::worker
