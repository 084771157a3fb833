// SPDX-License-Identifier: MIT
#pragma once
/// SyncBatchNorm: batch normalisation whose training statistics cover the global batch, the
/// C++ counterpart of torch.nn.SyncBatchNorm. Forward all-reduces per-channel (sum, sum of
/// squares, count) in one collective; backward all-reduces (sum dy, sum dy*(x-mean)) in one
/// collective inside a custom autograd Function; both run LibTorch's fused batch-norm kernels.
/// Unlike PyTorch's, it runs on CPU with Gloo.
/// Parameter and buffer names match BatchNorm's, so state dicts are interchangeable.
/// Without a communicator it is exactly BatchNorm (per-process statistics): declare layers as
/// SyncBatchNorm in your own modules and convert_sync_batchnorm attaches the communicator.

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/options/batchnorm.h>

#include <memory>

#include "ddprun/worker/communicator.hpp"

namespace ddp::worker {

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  /// `communicator` may be null: BatchNorm behaviour until set_communicator().
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options,
                             std::shared_ptr<Communicator> communicator = nullptr);
  void reset() override;
  void set_communicator(std::shared_ptr<Communicator> communicator) {
    communicator_ = std::move(communicator);
  }
  const std::shared_ptr<Communicator>& communicator() const { return communicator_; }
  /// Input (N, C, *): any BatchNorm1d/2d/3d layout.
  torch::Tensor forward(const torch::Tensor& input);

  torch::nn::BatchNormOptions options;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::shared_ptr<Communicator> communicator_;
};
TORCH_MODULE(SyncBatchNorm);

/// nn.SyncBatchNorm.convert_sync_batchnorm for C++ module trees. Walks every registered
/// submodule under `module` (custom modules, Sequential, ModuleList, ModuleDict, any depth):
///  - a SyncBatchNorm anywhere (a typed member of your module, an entry of a ModuleList...)
///    gets `communicator`: from then on its statistics cover the global batch;
///  - a torch::nn::BatchNorm1d/2d/3d inside a Sequential is replaced, in place, by a
///    SyncBatchNorm with the same options, parameters and running statistics (Sequential calls
///    its children through AnyModule, so the swap takes effect);
///  - a torch::nn::BatchNorm held anywhere else raises std::invalid_argument naming its path:
///    C++ code calls it through a typed member or cast that cannot be redirected (Python can,
///    by setattr); declare it as SyncBatchNorm there (without a communicator it is BatchNorm).
/// Returns how many layers synchronise now. Throws before changing anything when it raises.
int convert_sync_batchnorm(torch::nn::Module& module,
                           const std::shared_ptr<Communicator>& communicator);

}  // namespace ddp::worker
