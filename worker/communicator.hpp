// SPDX-License-Identifier: MIT
#pragma once
/// Collective communication as the worker library needs it, independent of the c10d version:
/// LibTorch 1.13 exposes process groups as c10d::ProcessGroup, 2.x as c10d::Backend; only
/// communicator.cpp sees either. This header stays free of LibTorch includes.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "worker/worker_env.hpp"

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
};

enum class Backend { Auto, Gloo, Nccl };

/// Parses "auto", "gloo" or "nccl"; throws std::invalid_argument otherwise.
Backend parse_backend(const std::string& name);

struct CommunicatorOptions {
  Backend backend = Backend::Auto;
  /// Bound on every store and collective operation: a dead or stuck peer becomes an exception.
  std::chrono::milliseconds timeout = std::chrono::seconds(120);
  /// Small CPU all-reduces through POSIX shared memory when all ranks are on this host
  /// (shm_communicator.hpp); also off when DDPRUN_NO_SHM is set.
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
  /// Starts an in-place sum over all ranks.
  virtual std::unique_ptr<PendingCollective> all_reduce_sum_async(at::Tensor& tensor) = 0;
  /// Overwrites `tensor` with rank `root`'s value.
  virtual void broadcast(at::Tensor& tensor, int root) = 0;

  void all_reduce_sum(at::Tensor& tensor) { all_reduce_sum_async(tensor)->wait(); }
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
