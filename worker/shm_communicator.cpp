// SPDX-License-Identifier: MIT
#include "worker/shm_communicator.hpp"

#include <ATen/ATen.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace ddp::worker {

bool shm_all_reduce_wanted(const WorkerEnv& env, bool option_enabled, bool cpu_device) {
  const char* off = std::getenv("DDPRUN_NO_SHM");
  const bool disabled_by_env = off != nullptr && std::string(off) != "" && std::string(off) != "0";
  return option_enabled && !disabled_by_env && cpu_device && env.launched && env.world_size > 1 &&
         env.local_world_size == env.world_size;
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

  std::unique_ptr<PendingCollective> all_reduce_sum_async(at::Tensor& tensor) override {
    // The choice depends only on dtype, device and size, which match on every rank, so all
    // ranks send the same collective down the same path.
    const auto element = element_of(tensor);
    const auto bytes = static_cast<std::size_t>(tensor.numel()) * tensor.element_size();
    if (!element || !tensor.device().is_cpu() || bytes > shm_->capacity()) {
      return inner_->all_reduce_sum_async(tensor);
    }
    if (tensor.is_contiguous()) {
      shm_->all_reduce_sum(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), *element);
    } else {
      at::Tensor dense = tensor.contiguous();
      shm_->all_reduce_sum(dense.data_ptr(), static_cast<std::size_t>(dense.numel()), *element);
      tensor.copy_(dense);
    }
    return std::make_unique<DoneCollective>();
  }

  void broadcast(at::Tensor& tensor, int root) override { inner_->broadcast(tensor, root); }

 private:
  static std::optional<ShmElement> element_of(const at::Tensor& tensor) {
    switch (tensor.scalar_type()) {
      case at::kFloat: return ShmElement::Float32;
      case at::kDouble: return ShmElement::Float64;
      case at::kLong: return ShmElement::Int64;
      default: return std::nullopt;
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
