// SPDX-License-Identifier: MIT
#include "ddprun/worker/ddp.hpp"

#include <torch/csrc/autograd/engine.h>
#include <torch/nn/module.h>

#include <map>
#include <stdexcept>

namespace ddp::worker {
// Named, not anonymous: Impl (declared in the header) holds a ReducerState, and GCC warns
// (-Wsubobject-linkage) when such a field's type has internal linkage in a unity build.
namespace reducer {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// Where one parameter's gradient lives inside its bucket.
struct Slot {
  std::size_t bucket = 0;
  at::Tensor view;  ///< The parameter-shaped window into the bucket's flat buffer.
  bool ready = false;
};

struct Bucket {
  at::Tensor flat;
  std::vector<std::size_t> params;
  std::size_t pending = 0;
  std::unique_ptr<PendingCollective> work;
  Clock::time_point launched_at;
};

/// Everything the gradient hooks touch. Hooks hold a weak_ptr, so a hook firing after the
/// wrapper is gone does nothing.
struct ReducerState {
  std::shared_ptr<Communicator> comm;
  std::vector<at::Tensor> params;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  std::size_t next_launch = 0;
  bool require_sync = true;
  bool in_backward = false;
  DdpStats stats;

  void on_gradient(std::size_t index, const at::Tensor& grad,
                   const std::weak_ptr<ReducerState>& self);
  void launch_in_order();
  void finalize();
  /// Waits for every bucket and adds this iteration's busy and exposed communication time.
  void wait_and_account(Clock::time_point backward_done);
};

void ReducerState::on_gradient(std::size_t index, const at::Tensor& grad,
                               const std::weak_ptr<ReducerState>& self) {
  if (!require_sync) return;
  if (!in_backward) {
    in_backward = true;
    next_launch = 0;
    for (auto& slot : slots) slot.ready = false;
    for (auto& bucket : buckets) {
      bucket.pending = bucket.params.size();
      bucket.work.reset();
    }
    // Runs once the whole backward graph has executed, inside loss.backward().
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (auto state = self.lock()) state->finalize();
    });
  }
  Slot& slot = slots[index];
  if (slot.ready) {
    throw std::logic_error(
        "DistributedDataParallel: a parameter received two gradients in one "
        "backward pass (reentrant backward is not supported)");
  }
  at::NoGradGuard no_grad;
  // The hook sees the gradient before AccumulateGrad adds it to .grad(): reduce the sum, which
  // is what .grad() will hold (it carries earlier no_sync() contributions).
  const at::Tensor& accumulated = params[index].grad();
  if (accumulated.defined()) {
    at::add_out(slot.view, accumulated, grad.reshape(slot.view.sizes()));
  } else {
    slot.view.copy_(grad.reshape(slot.view.sizes()));
  }
  slot.ready = true;
  if (--buckets[slot.bucket].pending == 0) launch_in_order();
}

void ReducerState::launch_in_order() {
  // Collectives must be issued in the same order on every rank: bucket k goes only after k-1.
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
    Bucket& bucket = buckets[next_launch++];
    if (comm->size() > 1) bucket.flat.div_(comm->size());
    bucket.launched_at = Clock::now();
    bucket.work = comm->all_reduce_sum_async(bucket.flat);
  }
}

void ReducerState::finalize() {
  struct ResetOnExit {
    bool& flag;
    ~ResetOnExit() { flag = false; }
  } reset{in_backward};
  at::NoGradGuard no_grad;
  const auto backward_done = Clock::now();
  // Parameters the graph did not reach still take part, so every rank issues the same
  // collectives: their contribution is whatever .grad() holds (zero if nothing).
  for (std::size_t i = 0; i < slots.size(); ++i) {
    Slot& slot = slots[i];
    if (slot.ready) continue;
    const at::Tensor& grad = params[i].grad();
    if (grad.defined()) {
      slot.view.copy_(grad.reshape(slot.view.sizes()));
    } else {
      slot.view.zero_();
    }
    slot.ready = true;
    --buckets[slot.bucket].pending;
  }
  launch_in_order();
  if (comm->size() == 1) {
    for (auto& bucket : buckets) bucket.work->wait();
  } else {
    wait_and_account(backward_done);
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    at::Tensor& grad = params[i].mutable_grad();
    if (grad.defined()) {
      grad.copy_(slots[i].view);
    } else {
      grad = slots[i].view.clone();
    }
  }
}

void ReducerState::wait_and_account(Clock::time_point backward_done) {
  Clock::time_point previous_end{};
  bool synchronous = false;
  for (auto& bucket : buckets) {
    bucket.work->wait();
    synchronous = synchronous || !bucket.work->asynchronous();
    const auto end = bucket.work->finished_at().value_or(Clock::now());
    const auto start = std::max(bucket.launched_at, previous_end);
    if (end > start) stats.comm_busy_s += seconds(end - start);
    previous_end = std::max(previous_end, end);
  }
  stats.comm_exposed_s += seconds(Clock::now() - backward_done);
  ++stats.iterations;
  if (synchronous) ++stats.synchronous_iterations;
}

}  // namespace reducer

using reducer::Bucket;
using reducer::ReducerState;

struct DistributedDataParallel::Impl {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<ReducerState> state = std::make_shared<ReducerState>();
  DdpOptions options;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<Communicator> communicator,
                                                 DdpOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!module) throw std::invalid_argument("DistributedDataParallel: module is null");
  if (!communicator) throw std::invalid_argument("DistributedDataParallel: communicator is null");
  impl_->module = std::move(module);
  impl_->options = options;
  ReducerState& state = *impl_->state;
  state.comm = std::move(communicator);
  for (auto& param : impl_->module->parameters()) {
    if (param.requires_grad()) state.params.push_back(param);
  }
  if (options.broadcast_at_construction) broadcast_state();

  // Buckets in reverse parameter order (the order backward produces gradients), the first
  // capped at first_bucket_bytes, the rest at bucket_cap_bytes; a dtype or device change
  // starts a new bucket.
  state.slots.resize(state.params.size());
  std::vector<std::vector<std::size_t>> groups;
  std::size_t group_bytes = 0;
  for (std::size_t k = state.params.size(); k-- > 0;) {
    const at::Tensor& param = state.params[k];
    const std::size_t bytes = static_cast<std::size_t>(param.numel()) * param.element_size();
    const std::size_t cap =
        groups.size() <= 1 ? options.first_bucket_bytes : options.bucket_cap_bytes;
    bool new_group = groups.empty();
    if (!new_group) {
      const at::Tensor& first = state.params[groups.back().front()];
      new_group = first.scalar_type() != param.scalar_type() || first.device() != param.device() ||
                  (group_bytes + bytes > cap && group_bytes > 0);
    }
    if (new_group) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(k);
    group_bytes += bytes;
  }
  for (auto& group : groups) {
    Bucket bucket;
    int64_t numel = 0;
    for (auto k : group) numel += state.params[k].numel();
    const at::Tensor& first = state.params[group.front()];
    bucket.flat = at::zeros({numel}, first.options().requires_grad(false));
    int64_t offset = 0;
    for (auto k : group) {
      const at::Tensor& param = state.params[k];
      state.slots[k].bucket = state.buckets.size();
      state.slots[k].view = bucket.flat.narrow(0, offset, param.numel()).view(param.sizes());
      offset += param.numel();
    }
    bucket.params = group;
    state.buckets.push_back(std::move(bucket));
  }

  std::weak_ptr<ReducerState> weak = impl_->state;
  for (std::size_t k = 0; k < state.params.size(); ++k) {
    state.params[k].register_hook([weak, k](const at::Tensor& grad) {
      if (auto locked = weak.lock()) locked->on_gradient(k, grad, weak);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

torch::nn::Module& DistributedDataParallel::module() const { return *impl_->module; }
Communicator& DistributedDataParallel::communicator() const { return *impl_->state->comm; }
std::size_t DistributedDataParallel::bucket_count() const { return impl_->state->buckets.size(); }
std::size_t DistributedDataParallel::bucket_numel(std::size_t bucket) const {
  return static_cast<std::size_t>(impl_->state->buckets.at(bucket).flat.numel());
}
const DdpStats& DistributedDataParallel::stats() const { return impl_->state->stats; }
void DistributedDataParallel::reset_stats() { impl_->state->stats = DdpStats{}; }

void DistributedDataParallel::broadcast_state() {
  Communicator& comm = *impl_->state->comm;
  if (comm.size() == 1) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors = impl_->module->parameters();
  for (auto& buffer : impl_->module->buffers()) tensors.push_back(buffer);
  // One broadcast per dtype: flatten, broadcast, scatter back.
  std::map<std::pair<int, std::string>, std::vector<at::Tensor>> by_type;
  for (auto& t : tensors) {
    by_type[{static_cast<int>(t.scalar_type()), t.device().str()}].push_back(t);
  }
  for (auto& [key, group] : by_type) {
    std::vector<at::Tensor> flat_parts;
    for (auto& t : group) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    comm.broadcast(flat, 0);
    int64_t offset = 0;
    for (auto& t : group) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.impl_->state->require_sync) {
  ddp_.impl_->state->require_sync = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  ddp_.impl_->state->require_sync = previous_;
}

}  // namespace ddp::worker
