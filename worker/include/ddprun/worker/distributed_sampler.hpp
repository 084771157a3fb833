// SPDX-License-Identifier: MIT
#pragma once
/// DistributedSampler: which dataset indices this rank visits in an epoch, index for index the
/// ones torch.utils.data.distributed.DistributedSampler yields for the same arguments:
/// torch.randperm under a generator seeded with seed + epoch (or 0..size-1 unshuffled), padded
/// by repeating from the start (or cut, with drop_last), then every num_replicas-th from rank.
///
/// It is a torch::data::samplers::Sampler, so it plugs into torch::data::make_data_loader:
///   DistributedSampler sampler(dataset.size().value(), comm->size(), comm->rank(), true, seed);
///   auto loader = torch::data::make_data_loader(dataset.map(Stack<>()), sampler, batch_size);
///   for (epoch...) { sampler.set_epoch(epoch); for (auto& batch : *loader) ... }
/// make_data_loader keeps its own copy of the sampler; copies share the epoch, so set_epoch on
/// the original reshuffles the loader's copy too (as sampler.set_epoch does in Python). The
/// loader calls reset() at the start of each pass, which draws that epoch's order.

#include <torch/data/samplers/base.h>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ddp::worker {

class DistributedSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  /// Throws std::invalid_argument when rank is not in [0, num_replicas) or size < 0.
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  /// Reshuffles for the epoch: call at the start of each epoch, as in PyTorch. Shared with
  /// every copy of this sampler (the one make_data_loader holds); takes effect at reset().
  void set_epoch(int64_t epoch) { *epoch_ = epoch; }
  int64_t epoch() const { return *epoch_; }

  /// This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;

  // torch::data::samplers::Sampler: what make_data_loader calls.
  /// Starts a pass over this epoch's indices (new_size: the dataset's size changed).
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  /// The next up to batch_size indices of this pass; nullopt when the pass is over.
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
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
  std::shared_ptr<int64_t> epoch_ = std::make_shared<int64_t>(0);
  int64_t num_samples_ = 0;
  std::vector<int64_t> pass_;  ///< This pass's indices (drawn at reset()).
  std::size_t position_ = 0;
  bool started_ = false;
  void compute_num_samples();
};

}  // namespace ddp::worker
