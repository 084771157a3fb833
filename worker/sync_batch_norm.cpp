// SPDX-License-Identifier: MIT
#include "worker/sync_batch_norm.hpp"

#include <torch/autograd.h>
#include <torch/nn/modules/batchnorm.h>

#include <stdexcept>

namespace ddp::worker {
namespace {

/// Shape (1, C, 1, ...) to broadcast a per-channel vector over an (N, C, *) input.
std::vector<int64_t> channel_shape(const torch::Tensor& input) {
  std::vector<int64_t> shape(static_cast<std::size_t>(input.dim()), 1);
  shape[1] = input.size(1);
  return shape;
}

/// Every dimension but the channel one.
std::vector<int64_t> reduce_dims(const torch::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

/// Normalisation with global batch statistics. Forward returns y and saves what backward needs;
/// the communicator travels as an address (saved_data holds IValues only); the module that owns
/// it outlives every graph built from its forward.
struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& mean, const torch::Tensor& invstd,
                               int64_t global_count, Communicator* comm) {
    const auto shape = channel_shape(input);
    torch::Tensor scale = weight.defined() ? weight * invstd : invstd;
    torch::Tensor shift = bias.defined() ? bias - mean * scale : -mean * scale;
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = global_count;
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    ctx->saved_data["has_weight"] = weight.defined();
    ctx->saved_data["has_bias"] = bias.defined();
    return torch::addcmul(shift.view(shape), input, scale.view(shape));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& mean = saved[2];
    const torch::Tensor& invstd = saved[3];
    const auto count = static_cast<double>(ctx->saved_data["count"].toInt());
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const torch::Tensor grad_out = grad_outputs[0].contiguous();
    const auto shape = channel_shape(input);
    const auto dims = reduce_dims(input);

    // Local sums; the weight and bias gradients use them as they are (DDP averages those).
    torch::Tensor sum_dy = grad_out.sum(dims);
    torch::Tensor sum_dy_xmu = (grad_out * input).sum(dims) - mean * sum_dy;
    torch::Tensor grad_weight, grad_bias, grad_input;
    if (ctx->saved_data["has_weight"].toBool()) grad_weight = sum_dy_xmu * invstd;
    if (ctx->saved_data["has_bias"].toBool()) grad_bias = sum_dy.clone();
    if (ctx->needs_input_grad(0)) {
      torch::Tensor both = torch::cat({sum_dy, sum_dy_xmu});
      comm->all_reduce_sum(both);
      const int64_t channels = input.size(1);
      torch::Tensor mean_dy = both.narrow(0, 0, channels) / count;
      torch::Tensor mean_dy_xmu = both.narrow(0, channels, channels) / count;
      torch::Tensor scale = weight.defined() ? weight * invstd : invstd;
      // dx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) * w * invstd
      torch::Tensor k = (invstd * invstd * mean_dy_xmu).view(shape);
      grad_input = (grad_out - mean_dy.view(shape) - (input - mean.view(shape)) * k) *
                   scale.view(shape);
    }
    return {grad_input, grad_weight, grad_bias, torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_,
                                     std::shared_ptr<Communicator> communicator)
    : options(options_), communicator_(std::move(communicator)) {
  if (!communicator_) throw std::invalid_argument("SyncBatchNorm: communicator is null");
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t channels = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", torch::ones({channels}));
    bias = register_parameter("bias", torch::zeros({channels}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", torch::zeros({channels}));
    running_var = register_buffer("running_var", torch::ones({channels}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2 && input.size(1) == options.num_features(),
              "SyncBatchNorm: expected input (N, ", options.num_features(), ", *), got ",
              input.sizes());
  const bool use_batch_stats = is_training() || !options.track_running_stats();
  if (!use_batch_stats) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, false, 0.0,
                             options.eps(), false);
  }
  const auto dims = reduce_dims(input);
  const int64_t channels = input.size(1);
  torch::Tensor mean, invstd;
  int64_t global_count = 0;
  {
    torch::NoGradGuard no_grad;
    // One collective for (sum, sum of squares, count); the count makes unequal per-rank batches
    // weigh correctly.
    const torch::Tensor x = input.detach();
    torch::Tensor stats =
        torch::cat({x.sum(dims), (x * x).sum(dims),
                    torch::full({1}, static_cast<double>(input.numel() / channels), x.options())});
    communicator_->all_reduce_sum(stats);
    stats = stats.to(torch::kDouble);
    global_count = static_cast<int64_t>(stats[2 * channels].item<double>() + 0.5);
    TORCH_CHECK(global_count > 1, "SyncBatchNorm: need more than 1 value per channel in training");
    const torch::Tensor mean_d = stats.narrow(0, 0, channels) / global_count;
    const torch::Tensor var_d =
        (stats.narrow(0, channels, channels) / global_count - mean_d * mean_d).clamp_min(0);
    mean = mean_d.to(input.scalar_type());
    invstd = (var_d + options.eps()).rsqrt().to(input.scalar_type());
    if (is_training() && options.track_running_stats()) {
      num_batches_tracked += 1;
      const double momentum = options.momentum().has_value()
                                  ? *options.momentum()
                                  : 1.0 / num_batches_tracked.item<double>();
      const torch::Tensor unbiased = var_d * (static_cast<double>(global_count) / (global_count - 1));
      running_mean.mul_(1 - momentum).add_(mean, momentum);
      running_var.mul_(1 - momentum).add_(unbiased.to(running_var.scalar_type()), momentum);
    }
  }
  return SyncBatchNormFunction::apply(input, weight, bias, mean, invstd, global_count,
                                      communicator_.get());
}

namespace {

template <typename BatchNormImplT>
std::shared_ptr<SyncBatchNormImpl> try_convert(const std::shared_ptr<torch::nn::Module>& child,
                                               const std::shared_ptr<Communicator>& comm) {
  auto* bn = dynamic_cast<BatchNormImplT*>(child.get());
  if (bn == nullptr) return nullptr;
  const auto& o = bn->options;
  torch::nn::BatchNormOptions options(o.num_features());
  options.eps(o.eps()).momentum(o.momentum()).affine(o.affine()).track_running_stats(
      o.track_running_stats());
  auto sync = std::make_shared<SyncBatchNormImpl>(options, comm);
  // Same dtype and device as the module it replaces (a double model stays double).
  const torch::Tensor& like = o.affine() ? bn->weight : bn->running_mean;
  if (like.defined()) sync->to(like.device(), like.scalar_type());
  torch::NoGradGuard no_grad;
  if (o.affine()) {
    sync->weight.copy_(bn->weight);
    sync->bias.copy_(bn->bias);
    sync->weight.set_requires_grad(bn->weight.requires_grad());
    sync->bias.set_requires_grad(bn->bias.requires_grad());
  }
  if (o.track_running_stats()) {
    sync->running_mean.copy_(bn->running_mean);
    sync->running_var.copy_(bn->running_var);
    sync->num_batches_tracked.copy_(bn->num_batches_tracked);
  }
  return sync;
}

std::shared_ptr<SyncBatchNormImpl> convert_one(const std::shared_ptr<torch::nn::Module>& child,
                                               const std::shared_ptr<Communicator>& comm) {
  if (auto s = try_convert<torch::nn::BatchNorm1dImpl>(child, comm)) return s;
  if (auto s = try_convert<torch::nn::BatchNorm2dImpl>(child, comm)) return s;
  return try_convert<torch::nn::BatchNorm3dImpl>(child, comm);
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<Communicator> communicator) {
  int converted = 0;
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module)) {
    // Sequential calls its AnyModule list, not the registry: swap both, slot by slot.
    const auto names = sequential->named_children().keys();
    std::size_t index = 0;
    for (auto& any : *sequential) {
      if (auto sync = convert_one(any.ptr(), communicator)) {
        sequential->replace_module(names.at(index), SyncBatchNorm(sync));
        any = torch::nn::AnyModule(SyncBatchNorm(sync));
        ++converted;
      }
      ++index;
    }
  }
  for (const auto& item : module.named_children()) {
    if (convert_one(item.value(), communicator)) {
      throw std::invalid_argument(
          "convert_sync_batchnorm: '" + item.key() + "' in " + module.name() +
          " is a BatchNorm held by a custom module; C++ cannot swap a typed member. Declare it "
          "as ddp::worker::SyncBatchNorm or put it in a torch::nn::Sequential");
    }
    converted += convert_sync_batchnorm(*item.value(), communicator);
  }
  return converted;
}

}  // namespace ddp::worker
