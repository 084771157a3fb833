// SPDX-License-Identifier: MIT
#pragma once
/// Collective communication as the worker library needs it, independent of the c10d version:
/// LibTorch 1.13 exposes process groups as c10d::ProcessGroup, 2.x as c10d::Backend; only
/// communicator.cpp sees either. This header stays free of LibTorch includes.

#include <any>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/worker/worker_env.hpp"

namespace at {
class Tensor;
}
namespace c10 {
struct Device;
}

namespace ddp::worker {

using Clock = std::chrono::steady_clock;

/// An all-reduce in flight. wait() rethrows the collective's error (a dead peer, a timeout).
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
  /// When the collective finished, if the backend reported it (used to measure overlap).
  virtual std::optional<Clock::time_point> finished_at() const = 0;
  /// False when the collective already ran to completion inside the call that started it (the
  /// shared-memory path, the one-process world): nothing can overlap it, so DDP reports no
  /// overlap figure for it.
  virtual bool asynchronous() const { return true; }
};

/// How all_reduce and reduce_scatter combine the ranks' values, as torch.distributed.ReduceOp.
/// Avg is Sum divided by size() (floating-point tensors only), on every backend.
enum class ReduceOp { Sum, Max, Min, Avg };

/// The job's key-value store (the c10d store the process group was built on, under this
/// attempt's prefix): small agreements between ranks outside the collectives.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// Blocks until `key` is set (bounded by the communicator's timeout).
  virtual std::string get(const std::string& key) = 0;
  /// Whether `key` is set; does not block.
  virtual bool check(const std::string& key) = 0;
};

enum class Backend { Auto, Gloo, Nccl };

/// Parses "auto", "gloo" or "nccl"; throws std::invalid_argument otherwise.
Backend parse_backend(const std::string& name);

struct CommunicatorOptions {
  Backend backend = Backend::Auto;
  /// Bound on every store and collective operation: a dead or stuck peer becomes an exception.
  std::chrono::milliseconds timeout = std::chrono::seconds(120);
  /// Small CPU all-reduces through POSIX shared memory when the launcher says all ranks share
  /// this host (WorkerEnv::all_ranks_on_this_host; shm_communicator.hpp); also off when
  /// DDPRUN_NO_SHM is set. When some rank cannot map the segment, every rank falls back to the
  /// process group alone and rank 0 says why on stderr.
  bool shared_memory = true;
};

/// A group of `size()` processes; every method is collective and must be called in the same
/// order on all ranks.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "gloo", "nccl" or "local" (the one-process world).
  virtual std::string backend_name() const = 0;
  /// Where tensors handed to this communicator must live (cpu, or cuda:LOCAL_RANK for NCCL).
  virtual c10::Device device() const = 0;
  /// Starts an in-place reduction over all ranks.
  virtual std::unique_ptr<PendingCollective> all_reduce_async(at::Tensor& tensor,
                                                              ReduceOp op = ReduceOp::Sum) = 0;
  /// Overwrites `tensor` with rank `root`'s value.
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  /// Every rank's `input` (same shape and dtype on every rank), in rank order.
  virtual std::vector<at::Tensor> all_gather(const at::Tensor& input) = 0;
  /// Reduces `input` over all ranks and returns this rank's slice of the result along dim 0
  /// (input.size(0) must be a multiple of size()), as torch.distributed.reduce_scatter_tensor.
  virtual at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op = ReduceOp::Sum) = 0;
  /// The store the group was built on; nullptr in the one-process world.
  virtual KeyValueStore* store() = 0;
  /// The c10d process group behind this communicator, type-erased so this header needs no
  /// c10d (ddprun/worker/process_group.hpp unwraps it); empty in the one-process world.
  virtual std::any native_process_group() const = 0;

  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) {
    all_reduce_async(tensor, op)->wait();
  }
  std::unique_ptr<PendingCollective> all_reduce_sum_async(at::Tensor& tensor) {
    return all_reduce_async(tensor, ReduceOp::Sum);
  }
  void all_reduce_sum(at::Tensor& tensor) { all_reduce(tensor, ReduceOp::Sum); }
  /// Returns when every rank has called barrier().
  void barrier();
};

/// Connects to the job's store (see WorkerEnv::use_agent_store) and creates the process group.
/// A process started without a launcher (env.launched false) gets a local one-process
/// communicator that needs no store; under a launcher even a world of 1 gets a real group.
/// Backend::Auto picks NCCL when this build has CUDA and a GPU is visible, else Gloo.
std::shared_ptr<Communicator> connect_communicator(const WorkerEnv& env,
                                                   const CommunicatorOptions& options);

}  // namespace ddp::worker
