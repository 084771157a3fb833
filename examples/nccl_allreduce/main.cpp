// SPDX-License-Identifier: MIT
// nccl_allreduce: NCCL all-reduce bandwidth across the ranks ddprun starts, one GPU per rank
// (cuda:LOCAL_RANK), reported as nccl-tests does (algbw = bytes / time; busbw = algbw * 2(n-1)/n,
// the per-link traffic of a ring all-reduce, comparable with the link's physical bandwidth).
//
// Rendezvous: rank 0 creates the ncclUniqueId and publishes it through the job's store; every
// rank reads it and calls ncclCommInitRank. The store is ddprun's agent store when
// TORCHELASTIC_USE_AGENT_STORE is true (keys under /worker/attempt_<n>/, as PyTorch's env://),
// else rank 0 hosts one on MASTER_PORT. No LibTorch: CUDA runtime, NCCL and ddprun's own store
// client only. Run: ddprun --nproc_per_node=N build/bin/nccl_allreduce
#include <cuda_runtime.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/worker/error_file.hpp"
#include "ddprun/worker/worker_env.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"

namespace {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess)
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(status));
}

/// Rank 0's store when the launcher hosts none: an io_context thread serving ddprun's server.
class HostedStore {
 public:
  explicit HostedStore(std::uint16_t port) {
    ddp::rdzv::StoreServerOptions options;
    options.bind_address = "0.0.0.0";
    options.port = port;
    server_ = std::make_unique<ddp::rdzv::StoreServer>(io_, options);
    server_->start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~HostedStore() {
    boost::asio::post(io_, [this] { server_->stop(); });
    io_.stop();
    thread_.join();
  }

 private:
  boost::asio::io_context io_;
  std::unique_ptr<ddp::rdzv::StoreServer> server_;
  std::thread thread_;
};

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  int step_factor = 4;
  int warmup = 5;
  int iters = 20;
};

ncclUniqueId exchange_unique_id(const ddp::worker::WorkerEnv& env,
                                std::unique_ptr<HostedStore>& hosted) {
  ddp::rdzv::StoreClientOptions client;
  client.host = env.master_addr;
  client.port = env.master_port;
  if (env.use_agent_store) {
    client.key_prefix = env.agent_store_prefix() + "/";
  } else if (env.rank == 0) {
    hosted = std::make_unique<HostedStore>(env.master_port);
  }
  ddp::rdzv::StoreClient store(client);
  ncclUniqueId id{};
  const std::string key = "nccl_allreduce/unique_id";
  if (env.rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string value = store.get(key);
    if (value.size() != sizeof(id)) throw std::runtime_error("malformed ncclUniqueId in the store");
    std::copy(value.begin(), value.end(), reinterpret_cast<char*>(&id));
  }
  // Rank 0 keeps hosting until every rank has read the id.
  store.add("nccl_allreduce/read", 1);
  if (env.rank == 0) {
    while (store.add("nccl_allreduce/read", 0) < env.world_size)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return id;
}

int run(const Options& options, const ddp::worker::WorkerEnv& env) {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (env.local_rank >= devices) {
    throw std::runtime_error("LOCAL_RANK " + std::to_string(env.local_rank) + " but only " +
                             std::to_string(devices) + " CUDA devices are visible");
  }
  check_cuda(cudaSetDevice(env.local_rank), "cudaSetDevice");
  std::unique_ptr<HostedStore> hosted;
  const ncclUniqueId id = exchange_unique_id(env, hosted);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, env.world_size, id, env.rank), "ncclCommInitRank");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::size_t max_count = options.max_bytes / sizeof(float);
  float* buffer = nullptr;
  check_cuda(cudaMalloc(&buffer, max_count * sizeof(float)), "cudaMalloc");

  // Correctness first: every rank contributes rank+1, so each element must become n(n+1)/2.
  std::vector<float> host(max_count, static_cast<float>(env.rank + 1));
  check_cuda(cudaMemcpy(buffer, host.data(), max_count * sizeof(float), cudaMemcpyHostToDevice),
             "cudaMemcpy");
  check_nccl(ncclAllReduce(buffer, buffer, max_count, ncclFloat, ncclSum, comm, stream),
             "ncclAllReduce");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check_cuda(cudaMemcpy(host.data(), buffer, max_count * sizeof(float), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
  // NOLINTNEXTLINE(bugprone-integer-division): exact, n * (n + 1) is even.
  const float expected = static_cast<float>(env.world_size * (env.world_size + 1) / 2);
  for (std::size_t i = 0; i < max_count; i += 4099) {
    if (host[i] != expected)
      throw std::runtime_error("all-reduce result wrong at element " + std::to_string(i));
  }

  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  const double bus_factor = 2.0 * (env.world_size - 1) / env.world_size;
  if (env.rank == 0) {
    std::printf(
        "# nccl_allreduce: %d ranks, float sum, in place, %d warmup + %d timed iterations\n",
        env.world_size, options.warmup, options.iters);
    std::printf("%12s %12s %12s %12s %12s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)");
  }
  double bus_sum = 0;
  int rows = 0;
  for (std::size_t bytes = options.min_bytes; bytes <= options.max_bytes;
       bytes *= options.step_factor) {
    const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
    for (int i = 0; i < options.warmup; ++i) {
      check_nccl(ncclAllReduce(buffer, buffer, count, ncclFloat, ncclSum, comm, stream),
                 "ncclAllReduce");
    }
    check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < options.iters; ++i) {
      check_nccl(ncclAllReduce(buffer, buffer, count, ncclFloat, ncclSum, comm, stream),
                 "ncclAllReduce");
    }
    check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    const double seconds = ms / 1000.0 / options.iters;
    const double algbw = static_cast<double>(count * sizeof(float)) / seconds / 1e9;
    bus_sum += algbw * bus_factor;
    ++rows;
    if (env.rank == 0) {
      std::printf("%12zu %12zu %12.1f %12.2f %12.2f\n", count * sizeof(float), count, seconds * 1e6,
                  algbw, algbw * bus_factor);
    }
  }
  if (env.rank == 0) std::printf("# Avg bus bandwidth: %.2f GB/s\n", rows ? bus_sum / rows : 0.0);
  cudaFree(buffer);
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"NCCL all-reduce bandwidth across ddprun's ranks (nccl-tests style)",
               "nccl_allreduce"};
  app.add_option("--min-bytes", options.min_bytes, "Smallest message")->capture_default_str();
  app.add_option("--max-bytes", options.max_bytes, "Largest message")->capture_default_str();
  app.add_option("--step-factor", options.step_factor, "Size multiplier between rows")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  app.add_option("--warmup", options.warmup, "Untimed iterations per size")->capture_default_str();
  app.add_option("--iters", options.iters, "Timed iterations per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  ddp::worker::WorkerEnv env;
  try {
    env = ddp::worker::worker_env_from_environment();
  } catch (const ddp::worker::WorkerEnvError& e) {
    std::fprintf(stderr, "nccl_allreduce: error: %s\n", e.what());
    return 2;
  }
  return ddp::worker::run_reporting_errors(env.error_file, [&] { return run(options, env); });
}
