// SPDX-License-Identifier: MIT
#include "ddprun/worker/shm_communicator.hpp"

#include <ATen/ATen.h>

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ddp::worker {

bool shm_all_reduce_wanted(const WorkerEnv& env, bool option_enabled, bool cpu_device) {
  const char* off = std::getenv("DDPRUN_NO_SHM");
  const bool disabled_by_env = off != nullptr && std::string(off) != "" && std::string(off) != "0";
  return option_enabled && !disabled_by_env && cpu_device && env.world_size > 1 &&
         env.all_ranks_on_this_host();
}

std::string shm_segment_tag(const WorkerEnv& env) {
  const char* run_id = std::getenv("TORCHELASTIC_RUN_ID");
  std::string tag;
  for (const char c : std::string(run_id != nullptr ? run_id : "none").substr(0, 32)) {
    tag += std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' ? c : '_';
  }
  return tag + "-r" + std::to_string(env.restart_count) + "-p" + std::to_string(env.master_port);
}

namespace {

class DoneCollective final : public PendingCollective {
 public:
  void wait() override {}
  std::optional<Clock::time_point> finished_at() const override { return at_; }
  bool asynchronous() const override { return false; }

 private:
  Clock::time_point at_ = Clock::now();
};

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::shared_ptr<Communicator> inner, std::unique_ptr<SharedMemoryAllReduce> shm)
      : inner_(std::move(inner)), shm_(std::move(shm)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return inner_->backend_name() + "+shm"; }
  c10::Device device() const override { return inner_->device(); }

  std::unique_ptr<PendingCollective> all_reduce_async(at::Tensor& tensor, ReduceOp op) override {
    // The choice depends only on dtype, device, size and op, which match on every rank, so all
    // ranks send the same collective down the same path.
    const auto element = element_of(tensor);
    const auto bytes = static_cast<std::size_t>(tensor.numel()) * tensor.element_size();
    if (!element || !tensor.device().is_cpu() || bytes > shm_->capacity()) {
      return inner_->all_reduce_async(tensor, op);
    }
    if (op == ReduceOp::Avg && !at::isFloatingType(tensor.scalar_type())) {
      throw std::invalid_argument("all_reduce AVG needs a floating-point tensor, got " +
                                  std::string(c10::toString(tensor.scalar_type())));
    }
    const ShmOp shm_op = op == ReduceOp::Max   ? ShmOp::Max
                         : op == ReduceOp::Min ? ShmOp::Min
                                               : ShmOp::Sum;
    if (tensor.is_contiguous()) {
      shm_->all_reduce(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), *element,
                       shm_op);
    } else {
      at::Tensor dense = tensor.contiguous();
      shm_->all_reduce(dense.data_ptr(), static_cast<std::size_t>(dense.numel()), *element, shm_op);
      tensor.copy_(dense);
    }
    if (op == ReduceOp::Avg) tensor.div_(size());
    return std::make_unique<DoneCollective>();
  }

  void broadcast(at::Tensor& tensor, int root) override { inner_->broadcast(tensor, root); }
  std::vector<at::Tensor> all_gather(const at::Tensor& input) override {
    return inner_->all_gather(input);
  }
  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override {
    return inner_->reduce_scatter(input, op);
  }
  KeyValueStore* store() override { return inner_->store(); }
  std::any native_process_group() const override { return inner_->native_process_group(); }

 private:
  static std::optional<ShmElement> element_of(const at::Tensor& tensor) {
    switch (tensor.scalar_type()) {
      case at::kFloat:
        return ShmElement::Float32;
      case at::kDouble:
        return ShmElement::Float64;
      case at::kLong:
        return ShmElement::Int64;
      default:
        return std::nullopt;
    }
  }

  std::shared_ptr<Communicator> inner_;
  std::unique_ptr<SharedMemoryAllReduce> shm_;
};

}  // namespace

std::shared_ptr<Communicator> with_shm_all_reduce(std::shared_ptr<Communicator> inner,
                                                  std::unique_ptr<SharedMemoryAllReduce> shm) {
  return std::make_shared<ShmCommunicator>(std::move(inner), std::move(shm));
}

}  // namespace ddp::worker
