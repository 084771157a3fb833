// SPDX-License-Identifier: MIT
#pragma once
/// DistributedDataParallel for any torch::nn::Module, the C++ counterpart of
/// torch.nn.parallel.DistributedDataParallel (LibTorch has none):
///  - construction broadcasts rank 0's parameters and buffers, so every replica starts equal;
///  - a hook on every parameter copies its gradient into a flat bucket; a full bucket's
///    all-reduce starts at once (buckets in reverse parameter order, the first one small, as
///    PyTorch's rebuilt buckets), so communication overlaps the rest of the backward pass;
///  - at the end of backward (an autograd-engine callback) the remaining buckets are launched,
///    all are awaited and the averaged gradients written back to param.grad(), so the usual
///    `loss.backward(); optimizer.step();` works unchanged;
///  - no_sync() skips communication so gradients accumulate locally, as in PyTorch.
/// The forward pass is the wrapped module's own: call it directly.

#include <cstddef>
#include <memory>

#include "ddprun/worker/communicator.hpp"

namespace torch::nn {
class Module;
}

namespace ddp::worker {

struct DdpOptions {
  /// PyTorch's bucket_cap_mb=25.
  std::size_t bucket_cap_bytes = std::size_t{25} * 1024 * 1024;
  /// PyTorch's _DEFAULT_FIRST_BUCKET_BYTES.
  std::size_t first_bucket_bytes = std::size_t{1024} * 1024;
  bool broadcast_at_construction = true;
};

/// Communication timing summed over synchronised backward passes.
struct DdpStats {
  long long iterations = 0;
  /// Iterations in which some bucket's reduction ran synchronously (the shared-memory path):
  /// it ran on the autograd thread, so "hidden behind backward" is not measured for them.
  long long synchronous_iterations = 0;
  double comm_busy_s = 0;     ///< Time the reductions kept the backend busy (serial queue model).
  double comm_exposed_s = 0;  ///< Time backward() waited for reductions after its last gradient.
  /// Whether overlap_fraction() means anything: every reduction ran asynchronously.
  bool overlap_measured() const { return iterations > 0 && synchronous_iterations == 0; }
  /// Fraction of communication hidden behind backward computation (see overlap_measured()).
  double overlap_fraction() const {
    return comm_busy_s > 0 ? 1.0 - comm_exposed_s / comm_busy_s : 0.0;
  }
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          std::shared_ptr<Communicator> communicator, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module() const;
  Communicator& communicator() const;

  /// While the returned guard lives, backward passes only accumulate gradients locally; the
  /// first synchronised backward after it averages the accumulated sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Number of buckets and their element counts, in launch order (for tests and logs).
  std::size_t bucket_count() const;
  std::size_t bucket_numel(std::size_t bucket) const;

  const DdpStats& stats() const;
  void reset_stats();

  /// Copies rank 0's parameters and buffers to every rank (done at construction).
  void broadcast_state();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::worker
