// SPDX-License-Identifier: MIT
// The only file that talks to c10d: the store (TCPStore, optionally the launcher's agent store
// behind PyTorch's PrefixStore) and the process group (Gloo, or NCCL when built with CUDA).
#include "ddprun/worker/communicator.hpp"
#include "ddprun/worker/process_group.hpp"
#include "ddprun/worker/shm_communicator.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef DDPRUN_WORKER_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <cstdio>
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

void require_floating_for_avg(const at::Tensor& tensor) {
  if (!at::isFloatingType(tensor.scalar_type())) {
    throw std::invalid_argument("all_reduce AVG needs a floating-point tensor, got " +
                                std::string(c10::toString(tensor.scalar_type())));
  }
}

class FinishedCollective final : public PendingCollective {
 public:
  void wait() override {}
  std::optional<Clock::time_point> finished_at() const override { return at_; }
  bool asynchronous() const override { return false; }

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
  std::unique_ptr<PendingCollective> all_reduce_async(at::Tensor& tensor, ReduceOp op) override {
    if (op == ReduceOp::Avg) require_floating_for_avg(tensor);
    return std::make_unique<FinishedCollective>();
  }
  void broadcast(at::Tensor&, int) override {}
  std::vector<at::Tensor> all_gather(const at::Tensor& input) override { return {input.clone()}; }
  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override {
    if (op == ReduceOp::Avg) require_floating_for_avg(input);
    return input.clone();
  }
  KeyValueStore* store() override { return nullptr; }
  std::any native_process_group() const override { return {}; }

 private:
  c10::Device device_;
};

/// A c10d store (TCPStore, or PrefixStore over it) as the library's KeyValueStore.
class C10dKeyValueStore final : public KeyValueStore {
 public:
  explicit C10dKeyValueStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key) override {
    const auto value = store_->get(key);
    return std::string(value.begin(), value.end());
  }
  bool check(const std::string& key) override { return store_->check({key}); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

/// AVG on every backend: the sum, divided by the group size once it has arrived.
class AveragingCollective final : public PendingCollective {
 public:
  AveragingCollective(std::unique_ptr<PendingCollective> sum, at::Tensor tensor, int size)
      : sum_(std::move(sum)), tensor_(std::move(tensor)), size_(size) {}
  void wait() override {
    sum_->wait();
    if (!divided_) tensor_.div_(size_);
    divided_ = true;
  }
  std::optional<Clock::time_point> finished_at() const override { return sum_->finished_at(); }
  bool asynchronous() const override { return sum_->asynchronous(); }

 private:
  std::unique_ptr<PendingCollective> sum_;
  at::Tensor tensor_;
  int size_;
  bool divided_ = false;
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
  C10dCommunicator(c10::intrusive_ptr<ProcessGroupT> group, c10::intrusive_ptr<c10d::Store> store,
                   c10::Device device, std::string name, int rank, int size)
      : group_(std::move(group)),
        store_(std::move(store)),
        device_(device),
        name_(std::move(name)),
        rank_(rank),
        size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return name_; }
  c10::Device device() const override { return device_; }

  std::unique_ptr<PendingCollective> all_reduce_async(at::Tensor& tensor, ReduceOp op) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    switch (op) {
      case ReduceOp::Sum:
        options.reduceOp = c10d::ReduceOp::SUM;
        break;
      case ReduceOp::Max:
        options.reduceOp = c10d::ReduceOp::MAX;
        break;
      case ReduceOp::Min:
        options.reduceOp = c10d::ReduceOp::MIN;
        break;
      case ReduceOp::Avg:
        // Gloo has no AVG (and NCCL's needs 2.10+): sum, then divide, on every backend alike.
        require_floating_for_avg(tensor);
        options.reduceOp = c10d::ReduceOp::SUM;
        return std::make_unique<AveragingCollective>(
            std::make_unique<C10dCollective>(group_->allreduce(tensors, options)), tensor, size_);
    }
    return std::make_unique<C10dCollective>(group_->allreduce(tensors, options));
  }

  std::vector<at::Tensor> all_gather(const at::Tensor& input) override {
    std::vector<at::Tensor> inputs{input.contiguous()};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty_like(inputs[0]));
    group_->allgather(outputs, inputs, c10d::AllgatherOptions{})->wait();
    return outputs[0];
  }

  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override {
    if (input.dim() == 0 || input.size(0) % size_ != 0) {
      throw std::invalid_argument("reduce_scatter: dim 0 of the input (" +
                                  std::to_string(input.dim() == 0 ? 0 : input.size(0)) +
                                  ") must be a multiple of the group size " +
                                  std::to_string(size_));
    }
    // LibTorch 1.13's Gloo has no reduce-scatter: reduce everything, keep this rank's slice.
    at::Tensor reduced = input.clone();
    all_reduce(reduced, op);
    const int64_t chunk = input.size(0) / size_;
    return reduced.narrow(0, rank_ * chunk, chunk).clone();
  }

  KeyValueStore* store() override { return &store_; }
  std::any native_process_group() const override { return ProcessGroupHandle(group_); }

  void broadcast(at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    group_->broadcast(tensors, options)->wait();
  }

 private:
  c10::intrusive_ptr<ProcessGroupT> group_;
  C10dKeyValueStore store_;
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

std::shared_ptr<Communicator> make_gloo(const WorkerEnv& env,
                                        const c10::intrusive_ptr<c10d::Store>& store,
                                        std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // On loopback-only hosts the default device (the hostname's address) may be unreachable.
  options->devices.push_back(is_loopback(env.master_addr)
                                 ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                 : c10d::ProcessGroupGloo::createDefaultDevice());
  auto group =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
  return std::make_shared<C10dCommunicator<c10d::ProcessGroupGloo>>(
      std::move(group), store, c10::Device(c10::kCPU), "gloo", env.rank, env.world_size);
}

#ifdef DDPRUN_WORKER_NCCL
std::shared_ptr<Communicator> make_nccl(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store,
                                        std::chrono::milliseconds timeout) {
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group =
      c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
  return std::make_shared<C10dCommunicator<c10d::ProcessGroupNCCL>>(
      std::move(group), store, device, "nccl", env.rank, env.world_size);
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
  KeyValueStore& kv = *gloo->store();
  SharedMemoryAllReduce::Rendezvous rendezvous{
      [&](const std::string& key, const std::string& value) { kv.set(key, value); },
      [&](const std::string& key) { return kv.get(key); },
      [&](const std::string& key) { return kv.check(key); }};
  try {
    return with_shm_all_reduce(gloo, std::make_unique<SharedMemoryAllReduce>(
                                         env.rank, env.world_size, kShmSlotBytes,
                                         shm_segment_tag(env), options.timeout, rendezvous));
  } catch (const ShmUnavailable& e) {
    // Every rank got the same verdict: all continue on Gloo alone.
    if (env.rank == 0)
      std::fprintf(stderr, "worker: %s; small all-reduces go over gloo\n", e.what());
    return gloo;
  }
}

}  // namespace ddp::worker
