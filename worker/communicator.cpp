// SPDX-License-Identifier: MIT
// The only file that talks to c10d: the store (TCPStore, optionally the launcher's agent store
// behind PyTorch's PrefixStore) and the process group (Gloo, or NCCL when built with CUDA).
#include "worker/communicator.hpp"
#include "worker/shm_communicator.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef DDPRUN_WORKER_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <mutex>
#include <stdexcept>

namespace ddp::worker {

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::Auto;
  if (name == "gloo") return Backend::Gloo;
  if (name == "nccl") return Backend::Nccl;
  throw std::invalid_argument("unknown backend '" + name + "' (expected auto, gloo or nccl)");
}

void Communicator::barrier() {
  // An all-reduce doubles as a barrier on every backend (Gloo's and NCCL's barrier() differ in
  // what they need across LibTorch versions).
  at::Tensor token = at::ones({1}, at::TensorOptions().device(device()));
  all_reduce_sum(token);
  // NCCL's wait() only orders the current CUDA stream; reading the value blocks the host too.
  (void)token.item<float>();
}

namespace {

class FinishedCollective final : public PendingCollective {
 public:
  void wait() override {}
  std::optional<Clock::time_point> finished_at() const override { return at_; }

 private:
  Clock::time_point at_ = Clock::now();
};

/// The one-process world: every collective is the identity.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(c10::Device device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "local"; }
  c10::Device device() const override { return device_; }
  std::unique_ptr<PendingCollective> all_reduce_sum_async(at::Tensor&) override {
    return std::make_unique<FinishedCollective>();
  }
  void broadcast(at::Tensor&, int) override {}

 private:
  c10::Device device_;
};

/// A c10d work item plus the time its future completed (set from the backend's thread).
class C10dCollective final : public PendingCollective {
 public:
  explicit C10dCollective(c10::intrusive_ptr<c10d::Work> work) : work_(std::move(work)) {
    auto finished = finished_;
    work_->getFuture()->addCallback([finished](c10::ivalue::Future&) {
      finished->store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    });
  }
  void wait() override { work_->wait(); }
  std::optional<Clock::time_point> finished_at() const override {
    const auto ticks = finished_->load(std::memory_order_acquire);
    if (ticks == 0) return std::nullopt;
    return Clock::time_point(Clock::duration(ticks));
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::shared_ptr<std::atomic<Clock::rep>> finished_ = std::make_shared<std::atomic<Clock::rep>>(0);
};

/// Any c10d process group type (ProcessGroupGloo, ProcessGroupNCCL; a ProcessGroup in LibTorch
/// 1.13, a Backend in 2.x: the calls used here are the same in both).
template <typename ProcessGroupT>
class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<ProcessGroupT> group, c10::Device device, std::string name,
                   int rank, int size)
      : group_(std::move(group)), device_(device), name_(std::move(name)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return name_; }
  c10::Device device() const override { return device_; }

  std::unique_ptr<PendingCollective> all_reduce_sum_async(at::Tensor& tensor) override {
    std::vector<at::Tensor> tensors{tensor};
    return std::make_unique<C10dCollective>(group_->allreduce(tensors, c10d::AllreduceOptions{}));
  }

  void broadcast(at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    group_->broadcast(tensors, options)->wait();
  }

 private:
  c10::intrusive_ptr<ProcessGroupT> group_;
  c10::Device device_;
  std::string name_;
  int rank_;
  int size_;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

c10::intrusive_ptr<c10d::Store> connect_store(const WorkerEnv& env,
                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = env.master_port;
  options.timeout = timeout;
  if (env.use_agent_store) {
    // The launcher hosts the store; every rank, 0 included, is a client, and keys go under the
    // same prefix PyTorch's env:// rendezvous uses, so restarts never see stale keys.
    options.isServer = false;
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    return c10::make_intrusive<c10d::PrefixStore>(env.agent_store_prefix(), store);
  }
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = true;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
}

std::shared_ptr<Communicator> make_gloo(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store,
                                        std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // On loopback-only hosts the default device (the hostname's address) may be unreachable.
  options->devices.push_back(is_loopback(env.master_addr)
                                 ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                 : c10d::ProcessGroupGloo::createDefaultDevice());
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
  return std::make_shared<C10dCommunicator<c10d::ProcessGroupGloo>>(
      std::move(group), c10::Device(c10::kCPU), "gloo", env.rank, env.world_size);
}

#ifdef DDPRUN_WORKER_NCCL
std::shared_ptr<Communicator> make_nccl(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store,
                                        std::chrono::milliseconds timeout) {
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
  return std::make_shared<C10dCommunicator<c10d::ProcessGroupNCCL>>(std::move(group), device, "nccl",
                                                                    env.rank, env.world_size);
}
#endif

bool nccl_compiled() {
#ifdef DDPRUN_WORKER_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace

std::shared_ptr<Communicator> connect_communicator(const WorkerEnv& env,
                                                   const CommunicatorOptions& options) {
  Backend backend = options.backend;
  if (backend == Backend::Auto) {
    backend = nccl_compiled() && at::hasCUDA() ? Backend::Nccl : Backend::Gloo;
  }
  if (backend == Backend::Nccl && !nccl_compiled()) {
    throw std::runtime_error("--backend nccl: this worker was built without CUDA/NCCL support");
  }
  if (backend == Backend::Nccl && !at::hasCUDA()) {
    throw std::runtime_error("--backend nccl: no CUDA device is visible");
  }
  if (!env.launched) {
    return std::make_shared<LocalCommunicator>(
        backend == Backend::Nccl
            ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank))
            : c10::Device(c10::kCPU));
  }
  auto store = connect_store(env, options.timeout);
#ifdef DDPRUN_WORKER_NCCL
  if (backend == Backend::Nccl) return make_nccl(env, std::move(store), options.timeout);
#endif
  auto gloo = make_gloo(env, store, options.timeout);
  if (!shm_all_reduce_wanted(env, options.shared_memory, true)) return gloo;
  SharedMemoryAllReduce::Rendezvous rendezvous{
      [&](const std::string& key, const std::string& value) {
        store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
      },
      [&](const std::string& key) {
        const auto value = store->get(key);
        return std::string(value.begin(), value.end());
      }};
  return with_shm_all_reduce(std::move(gloo), std::make_unique<SharedMemoryAllReduce>(
                                                  env.rank, env.world_size, kShmSlotBytes,
                                                  shm_segment_tag(env), options.timeout, rendezvous));
}

}  // namespace ddp::worker
