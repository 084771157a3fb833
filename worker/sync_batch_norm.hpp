// SPDX-License-Identifier: MIT
#pragma once
/// SyncBatchNorm: batch normalisation whose training statistics cover the global batch, the
/// C++ counterpart of torch.nn.SyncBatchNorm. Forward all-reduces per-channel (sum, sum of
/// squares, count) in one collective; backward all-reduces (sum dy, sum dy*(x-mean)) in one
/// collective inside a custom autograd Function; both run LibTorch's fused batch-norm kernels.
/// Unlike PyTorch's, it runs on CPU with Gloo.
/// Parameter and buffer names match BatchNorm's, so state dicts are interchangeable.

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/options/batchnorm.h>

#include <memory>

#include "worker/communicator.hpp"

namespace ddp::worker {

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  SyncBatchNormImpl(const torch::nn::BatchNormOptions& options,
                    std::shared_ptr<Communicator> communicator);
  void reset() override;
  /// Input (N, C, *): any BatchNorm1d/2d/3d layout.
  torch::Tensor forward(const torch::Tensor& input);

  torch::nn::BatchNormOptions options;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::shared_ptr<Communicator> communicator_;
};
TORCH_MODULE(SyncBatchNorm);

/// Replaces, in place, every BatchNorm1d/2d/3d held by a Sequential anywhere under `module`
/// with a SyncBatchNorm carrying the same options, parameters and running statistics (as
/// nn.SyncBatchNorm.convert_sync_batchnorm). Returns how many were replaced. A BatchNorm held
/// directly by a custom module cannot be swapped in C++ (its forward calls a typed member):
/// that raises std::invalid_argument naming it; declare SyncBatchNorm there instead.
int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<Communicator> communicator);

}  // namespace ddp::worker
