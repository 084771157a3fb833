// SPDX-License-Identifier: MIT
#include "ddprun/worker/distributed_sampler.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <stdexcept>
#include <string>

namespace ddp::worker {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1)
    throw std::invalid_argument("DistributedSampler: num_replicas must be >= 1");
  if (rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument("DistributedSampler: invalid rank " + std::to_string(rank) +
                                ", rank should be in the interval [0, " +
                                std::to_string(num_replicas - 1) + "]");
  }
  if (dataset_size < 0) throw std::invalid_argument("DistributedSampler: negative dataset size");
  compute_num_samples();
}

void DistributedSampler::compute_num_samples() {
  // PyTorch: with drop_last and an uneven split, drop the tail so every rank gets the same count.
  if (drop_last_ && dataset_size_ % num_replicas_ != 0) {
    num_samples_ = (dataset_size_ - num_replicas_ + num_replicas_ - 1) / num_replicas_;
    if (dataset_size_ < num_replicas_) num_samples_ = 0;
  } else {
    num_samples_ = (dataset_size_ + num_replicas_ - 1) / num_replicas_;
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  order.reserve(static_cast<std::size_t>(dataset_size_));
  if (shuffle_) {
    // Same generator and algorithm as torch.randperm(n, generator=g) after g.manual_seed(s).
    at::Generator generator =
        at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(*epoch_));
    const at::Tensor perm = at::randperm(dataset_size_, generator, at::TensorOptions(at::kLong));
    const int64_t* data = perm.data_ptr<int64_t>();
    order.assign(data, data + dataset_size_);
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order.push_back(i);
  }
  const int64_t total = total_size();
  if (!drop_last_) {
    // Pad by repeating the list from its start (several times over when it is short).
    for (int64_t i = 0; static_cast<int64_t>(order.size()) < total && dataset_size_ > 0; ++i) {
      order.push_back(order[static_cast<std::size_t>(i % dataset_size_)]);
    }
  } else {
    order.resize(static_cast<std::size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_)
    mine.push_back(order[static_cast<std::size_t>(i)]);
  return mine;
}

}  // namespace ddp::worker

namespace ddp::worker {

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  if (new_size) {
    dataset_size_ = static_cast<int64_t>(*new_size);
    compute_num_samples();
  }
  pass_ = indices();
  position_ = 0;
  started_ = true;
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (!started_) reset();
  if (position_ >= pass_.size()) return torch::nullopt;
  const std::size_t end = std::min(pass_.size(), position_ + batch_size);
  std::vector<size_t> batch(pass_.begin() + static_cast<std::ptrdiff_t>(position_),
                            pass_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor(*epoch_, torch::kInt64), /*is_buffer=*/true);
  archive.write("position", torch::tensor(static_cast<int64_t>(position_), torch::kInt64), true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor epoch = torch::empty({}, torch::kInt64), position = torch::empty({}, torch::kInt64);
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, true);
  *epoch_ = epoch.item<int64_t>();
  reset();
  position_ = std::min(pass_.size(), static_cast<std::size_t>(position.item<int64_t>()));
}

}  // namespace ddp::worker
