// SPDX-License-Identifier: MIT
#include "ddprun/worker/sync_batch_norm.hpp"

#include <torch/autograd.h>
#include <torch/nn/modules/batchnorm.h>

#include <cmath>
#include <stdexcept>

namespace ddp::worker {
namespace {

/// Shape (1, C, 1, ...) to broadcast a per-channel vector over an (N, C, *) input.
std::vector<int64_t> channel_shape(const torch::Tensor& input) {
  std::vector<int64_t> shape(static_cast<std::size_t>(input.dim()), 1);
  shape[1] = input.size(1);
  return shape;
}

/// Normalisation with global batch statistics. Forward and backward run LibTorch's fused CPU/CUDA
/// batch-norm kernels in their eval form, with the global mean and variance standing in for the
/// running statistics, and add the terms that training mode needs from the all-reduced sums.
/// The communicator travels as an address (saved_data holds IValues only); the module owning it
/// outlives every graph built from its forward.
struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& mean, const torch::Tensor& var, double eps,
                               int64_t global_count, Communicator* comm) {
    ctx->save_for_backward({input, weight, mean, var});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["count"] = global_count;
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    ctx->saved_data["has_bias"] = bias.defined();
    // y = (x - mean) / sqrt(var + eps) * w + b, in one fused pass.
    return std::get<0>(at::native_batch_norm(input, weight, bias, mean, var, false, 0.0, eps));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const bool has_weight = saved[1].defined();
    const torch::Tensor weight =
        has_weight ? saved[1] : torch::ones({input.size(1)}, input.options());
    const torch::Tensor& mean = saved[2];
    const torch::Tensor& var = saved[3];
    const double eps = ctx->saved_data["eps"].toDouble();
    const auto count = static_cast<double>(ctx->saved_data["count"].toInt());
    // NOLINTNEXTLINE(performance-no-int-to-ptr): forward() saved the pointer as an int IValue.
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    // Keep the input's layout (NHWC stays NHWC: the fused kernels have fast paths for both).
    const torch::Tensor grad_out = grad_outputs[0].contiguous(input.suggest_memory_format());
    const auto shape = channel_shape(input);

    // Eval-form backward, one fused pass: dy * w * invstd, sum(dy * (x - mean) * invstd) and
    // sum(dy) over this rank's batch; the last two are the local weight and bias gradients
    // (DDP averages those, as PyTorch's SyncBatchNorm does).
    auto [grad_input, grad_weight, grad_bias] = at::native_batch_norm_backward(
        grad_out, input, weight, mean, var, {}, {}, false, eps, {true, true, true});
    if (ctx->needs_input_grad(0)) {
      const torch::Tensor invstd = (var + eps).rsqrt();
      // Training form: dx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) * w *
      // invstd with the means over the global batch = eval form + x * a + c, a and c per channel.
      torch::Tensor sums = torch::cat({grad_bias, grad_weight / invstd});
      comm->all_reduce_sum(sums);
      const int64_t channels = input.size(1);
      const torch::Tensor mean_dy = sums.narrow(0, 0, channels) / count;
      const torch::Tensor mean_dy_xmu = sums.narrow(0, channels, channels) / count;
      const torch::Tensor scale = weight * invstd;
      const torch::Tensor a = -scale * invstd * invstd * mean_dy_xmu;
      const torch::Tensor c = -scale * mean_dy - a * mean;
      grad_input.addcmul_(input, a.view(shape)).add_(c.view(shape));
    } else {
      grad_input = torch::Tensor();
    }
    if (!has_weight) grad_weight = torch::Tensor();
    if (!ctx->saved_data["has_bias"].toBool()) grad_bias = torch::Tensor();
    return {grad_input,      grad_weight,     grad_bias,       torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& batch_norm_options,
                                     std::shared_ptr<Communicator> communicator)
    : options(batch_norm_options), communicator_(std::move(communicator)) {
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
  if (!communicator_) {
    // Not converted yet: exactly torch::nn::BatchNorm's forward (per-process statistics).
    double momentum = options.momentum().value_or(0.0);
    if (is_training() && options.track_running_stats()) {
      num_batches_tracked += 1;
      if (!options.momentum().has_value()) momentum = 1.0 / num_batches_tracked.item<double>();
    }
    return torch::batch_norm(input, weight, bias, running_mean, running_var, use_batch_stats,
                             momentum, options.eps(), at::globalContext().userEnabledCuDNN());
  }
  if (!use_batch_stats) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, false, 0.0,
                             options.eps(), false);
  }
  const int64_t channels = input.size(1);
  torch::Tensor mean, var;
  int64_t global_count = 0;
  {
    torch::NoGradGuard no_grad;
    // Local mean and biased variance in one fused pass; one collective then sums
    // (n * mean, n * (var + mean^2), n) over ranks. The count makes unequal per-rank batches
    // weigh correctly.
    const torch::Tensor x = input.detach();
    const auto [local_mean, local_var] = at::batch_norm_update_stats(x, {}, {}, 0.0);
    // NOLINTNEXTLINE(bugprone-integer-division): exact, numel() is a multiple of channels.
    const double n = static_cast<double>(input.numel() / channels);
    const torch::Tensor local_mean_d = local_mean.to(torch::kDouble);
    torch::Tensor stats =
        torch::cat({local_mean_d * n,
                    (local_var.to(torch::kDouble) + local_mean_d * local_mean_d) * n,
                    torch::full({1}, n, local_mean_d.options())})
            .to(x.device());
    communicator_->all_reduce_sum(stats);
    stats = stats.cpu();
    global_count = std::llround(stats[2 * channels].item<double>());
    TORCH_CHECK(global_count > 1, "SyncBatchNorm: need more than 1 value per channel in training");
    const torch::Tensor mean_d = stats.narrow(0, 0, channels) / global_count;
    const torch::Tensor var_d =
        (stats.narrow(0, channels, channels) / global_count - mean_d * mean_d).clamp_min(0);
    mean = mean_d.to(input.options());
    var = var_d.to(input.options());
    if (is_training() && options.track_running_stats()) {
      num_batches_tracked += 1;
      const double momentum = options.momentum().has_value()
                                  ? *options.momentum()
                                  : 1.0 / num_batches_tracked.item<double>();
      const torch::Tensor unbiased =
          var_d * (static_cast<double>(global_count) / (global_count - 1));
      running_mean.mul_(1 - momentum).add_(mean_d.to(running_mean.options()), momentum);
      running_var.mul_(1 - momentum).add_(unbiased.to(running_var.options()), momentum);
    }
  }
  return SyncBatchNormFunction::apply(input, weight, bias, mean, var, options.eps(), global_count,
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
  options.eps(o.eps())
      .momentum(o.momentum())
      .affine(o.affine())
      .track_running_stats(o.track_running_stats());
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

bool is_torch_batch_norm(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module) != nullptr;
}

/// Finds every torch BatchNorm that cannot be swapped (not a Sequential's child), so the
/// conversion fails before it changes anything.
void check_convertible(const torch::nn::Module& module, const std::string& path) {
  const bool sequential = dynamic_cast<const torch::nn::SequentialImpl*>(&module) != nullptr;
  for (const auto& item : module.named_children()) {
    const std::string child_path = path.empty() ? item.key() : path + "." + item.key();
    if (is_torch_batch_norm(*item.value()) && !sequential) {
      throw std::invalid_argument(
          "convert_sync_batchnorm: '" + child_path + "' (" + item.value()->name() + " in " +
          module.name() +
          ") is a torch::nn BatchNorm outside a Sequential; C++ calls it through a "
          "typed member or cast that cannot be redirected. Declare it as "
          "ddp::worker::SyncBatchNorm "
          "(it is BatchNorm until converted)");
    }
    check_convertible(*item.value(), child_path);
  }
}

int convert_tree(torch::nn::Module& module, const std::shared_ptr<Communicator>& communicator) {
  int converted = 0;
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module)) {
    // Sequential calls its AnyModule list, not the registry: swap both, slot by slot.
    const auto names = sequential->named_children().keys();
    std::size_t index = 0;
    for (auto& any : *sequential) {
      if (auto sync = convert_one(any.ptr(), communicator)) {
        sequential->replace_module(names.at(index), SyncBatchNorm(sync));
        any = torch::nn::AnyModule(SyncBatchNorm(sync));
      }
      ++index;
    }
  }
  if (auto* sync = dynamic_cast<SyncBatchNormImpl*>(&module)) {
    sync->set_communicator(communicator);
    ++converted;
  }
  for (const auto& child : module.children()) converted += convert_tree(*child, communicator);
  return converted;
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& module,
                           const std::shared_ptr<Communicator>& communicator) {
  if (!communicator) throw std::invalid_argument("convert_sync_batchnorm: communicator is null");
  if (is_torch_batch_norm(module)) {
    throw std::invalid_argument(
        "convert_sync_batchnorm: the root module is itself a torch::nn BatchNorm; "
        "use ddp::worker::SyncBatchNorm in its place");
  }
  check_convertible(module, "");
  return convert_tree(module, communicator);
}

}  // namespace ddp::worker
