// SPDX-License-Identifier: MIT
#include "examples/worker/train.hpp"

#include <fmt/core.h>
#include <sys/resource.h>
#include <unistd.h>

#include <torch/torch.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ddprun/worker/checkpoint.hpp"
#include "ddprun/worker/checkpoint_file.hpp"
#include "ddprun/worker/communicator.hpp"
#include "ddprun/worker/ddp.hpp"
#include "ddprun/worker/distributed_sampler.hpp"
#include "ddprun/worker/heartbeat.hpp"
#include "ddprun/worker/sync_batch_norm.hpp"
#include "examples/worker/fashion_mnist.hpp"
#include "examples/worker/model.hpp"
#include "examples/worker/progress.hpp"

namespace ddp::examples {
namespace {

using worker::Communicator;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Intra-op threads: the flag, else OMP_NUM_THREADS (which LibTorch already honours), else the
/// cores shared out among this node's ranks so they do not oversubscribe the CPU.
void configure_threads(int requested, const worker::WorkerEnv& env) {
  if (requested > 0) {
    at::set_num_threads(requested);
  } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / env.local_world_size));
  }
}

/// Test accuracy over the whole test set: each rank scores a contiguous share, then the
/// (correct, total) counts are summed.
double evaluate(torch::nn::Sequential& model, const LabelledImages& test, Communicator& comm,
                at::MemoryFormat memory_format) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t n = test.size();
  const int64_t begin = n * comm.rank() / comm.size();
  const int64_t end = n * (comm.rank() + 1) / comm.size();
  int64_t correct = 0;
  for (int64_t i = begin; i < end; i += 1000) {
    const int64_t len = std::min<int64_t>(1000, end - i);
    auto x = test.images.narrow(0, i, len).to(comm.device()).contiguous(memory_format);
    auto y = test.labels.narrow(0, i, len).to(comm.device());
    correct += model->forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  torch::Tensor counts =
      torch::tensor({static_cast<double>(correct), static_cast<double>(end - begin)},
                    torch::TensorOptions(torch::kDouble).device(comm.device()));
  comm.all_reduce_sum(counts);
  counts = counts.cpu();
  model->train();
  return counts[0].item<double>() / std::max(1.0, counts[1].item<double>());
}

/// CPU seconds (user + system, all threads) this process has used: a throughput measure that
/// other load on the machine does not distort.
double process_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

/// What the checkpoint's "data" identity says: the source, its size and a digest of its content
/// (labels exactly, images by their sum), and the seed that fixes initial weights and order.
std::string data_fingerprint(const TrainOptions& options, const LabelledImages& train_set) {
  const torch::Tensor labels = train_set.labels.contiguous();
  const std::string_view label_bytes(
      static_cast<const char*>(labels.data_ptr()),
      static_cast<std::size_t>(labels.numel()) * labels.element_size());
  const std::string source =
      options.synthetic > 0 ? fmt::format("synthetic {}", options.synthetic) : options.data_dir;
  return fmt::format("{}; {} images; labels crc64 {:016x}; pixel sum {:.6e}; seed {}", source,
                     train_set.size(), worker::crc64(label_bytes),
                     train_set.images.sum(at::kDouble).item<double>(), options.seed);
}

worker::ResumePolicy resume_policy(const std::string& name) {
  if (name == "always") return worker::ResumePolicy::Always;
  if (name == "never") return worker::ResumePolicy::Never;
  return worker::ResumePolicy::OnRestart;
}

void dump_parameters(const std::string& prefix, torch::nn::Module& model, int rank) {
  std::vector<torch::Tensor> tensors;
  for (auto& p : model.parameters()) tensors.push_back(p.detach().cpu());
  for (auto& b : model.buffers()) tensors.push_back(b.detach().cpu());
  // Raw float values one tensor after another: trivially compared bit for bit by tests.
  std::ofstream out(prefix + ".rank" + std::to_string(rank), std::ios::binary | std::ios::trunc);
  for (auto& t : tensors) {
    auto c = t.to(torch::kDouble).contiguous();
    out.write(reinterpret_cast<const char*>(c.data_ptr<double>()),
              static_cast<std::streamsize>(c.numel() * sizeof(double)));
  }
}

}  // namespace

int train(const TrainOptions& options, const worker::WorkerEnv& env) {
  configure_threads(options.threads, env);
  worker::CommunicatorOptions comm_options;
  comm_options.backend = worker::parse_backend(options.backend);
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000));
  comm_options.shared_memory = options.shared_memory;
  auto comm = worker::connect_communicator(env, comm_options);
  const bool chief = comm->rank() == 0;
  const torch::Device device = comm->device();

  LabelledImages train_set, test_set;
  if (options.synthetic > 0) {
    train_set = synthetic_images(options.synthetic, 1234);
    test_set = synthetic_images(std::max<int64_t>(options.synthetic / 5, 10), 4321);
  } else {
    train_set = load_fashion_mnist(options.data_dir, "train");
    test_set = load_fashion_mnist(options.data_dir, "t10k");
  }
  if (chief) {
    fmt::print(
        "worker: {} ranks, backend {}, device {}, {} threads per rank, {} training images{}\n",
        comm->size(), comm->backend_name(), device.str(), at::get_num_threads(), train_set.size(),
        options.synthetic > 0 ? " (synthetic)" : "");
  }

  torch::manual_seed(options.seed);  // as the Python baseline: the same initial weights
  auto model = make_fashion_cnn();
  if (options.sync_batch_norm) worker::convert_sync_batchnorm(*model, comm);
  model->to(device);
  const auto memory_format =
      options.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  if (options.channels_last) {
    // NHWC weights and inputs select other CPU convolution and pooling kernels (30% faster than
    // NCHW in Python 1.13 for this model; no faster in this C++ program, hence not the default).
    torch::NoGradGuard no_grad;
    for (auto& param : model->parameters()) {
      if (param.dim() == 4) param.set_data(param.contiguous(memory_format));
    }
  }
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(options.lr).momentum(options.momentum));

  // Every rank agrees on the resume point (rank 0 reads its checkpoint and sends the bytes)
  // before DDP's first broadcast, so all replicas start from the same state.
  const worker::CheckpointIdentity identity{env.run_id, comm->size(),
                                            data_fingerprint(options, train_set),
                                            worker::model_fingerprint(*model)};
  worker::TrainingProgress progress;
  const worker::ResumeOutcome resumed =
      worker::resume_from_checkpoint(options.checkpoint, *model, optimizer, identity,
                                     resume_policy(options.resume), env.restart_count, *comm);
  if (chief && !resumed.note.empty()) fmt::print(stderr, "worker: {}\n", resumed.note);
  if (resumed.resumed) {
    progress = resumed.progress;
    if (chief) {
      const std::string attempt =
          env.restart_count > 0 ? fmt::format("restart {}: ", env.restart_count) : "";
      fmt::print("worker: {}resumed from {} after epoch {} (step {})\n", attempt,
                 options.checkpoint, progress.epoch, progress.step);
    }
  }
  worker::DdpOptions ddp_options;
  ddp_options.bucket_cap_bytes = static_cast<std::size_t>(options.bucket_kb) * 1024;
  ddp_options.first_bucket_bytes = std::min<std::size_t>(ddp_options.bucket_cap_bytes, 1 << 20);
  worker::DistributedDataParallel ddp(model.ptr(), comm, ddp_options);

  worker::DistributedSampler sampler(train_set.size(), comm->size(), comm->rank(), true,
                                     options.seed);
  ProgressReporter reporter(chief, ::isatty(STDOUT_FILENO) == 1, options.log_every);
  // Progress for ddprun's hang verdict, /status and stragglers (nothing when not under ddprun).
  worker::Heartbeat heartbeat = worker::Heartbeat::from_environment();
  double train_seconds = 0;
  double train_cpu_seconds = 0;  // this rank's
  int64_t train_samples = 0;
  double last_accuracy = -1;
  for (int64_t epoch = progress.epoch; epoch < options.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> indices = sampler.indices();
    const torch::Tensor order = torch::tensor(indices, torch::kLong);
    int64_t steps =
        (static_cast<int64_t>(indices.size()) + options.batch_size - 1) / options.batch_size;
    if (options.max_steps > 0) steps = std::min(steps, options.max_steps);
    reporter.start_epoch(epoch, options.epochs, steps);
    const auto epoch_start = std::chrono::steady_clock::now();
    const double epoch_cpu_start = process_cpu_seconds();
    int64_t epoch_samples = 0;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t begin = step * options.batch_size;
      const int64_t len =
          std::min<int64_t>(options.batch_size, static_cast<int64_t>(indices.size()) - begin);
      const torch::Tensor batch = order.narrow(0, begin, len);
      const torch::Tensor x =
          train_set.images.index_select(0, batch).to(device).contiguous(memory_format);
      const torch::Tensor y = train_set.labels.index_select(0, batch).to(device);
      optimizer.zero_grad();
      const torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      optimizer.step();
      ++progress.step;
      heartbeat.step(progress.step);
      epoch_samples += len * comm->size();
      reporter.step(step + 1, loss.item<double>(), epoch_samples / seconds_since(epoch_start));
    }
    const double epoch_seconds = seconds_since(epoch_start);
    train_seconds += epoch_seconds;
    train_cpu_seconds += process_cpu_seconds() - epoch_cpu_start;
    train_samples += epoch_samples;
    reporter.end_epoch();
    progress.epoch = epoch + 1;
    if (options.evaluate) last_accuracy = evaluate(model, test_set, *comm, memory_format);
    worker::save_checkpoint(options.checkpoint, *model, optimizer, progress, identity, *comm);
    if (chief) {
      const std::string accuracy =
          options.evaluate ? fmt::format(", test accuracy {:.2f}%", 100 * last_accuracy) : "";
      fmt::print("epoch {}/{}: {:.1f} s, {:.0f} samples/s{}, checkpoint {}\n", epoch + 1,
                 options.epochs, epoch_seconds, epoch_samples / epoch_seconds, accuracy,
                 options.checkpoint);
      std::fflush(stdout);
    }
    if (epoch + 1 == options.fail_after_epoch && env.restart_count == 0 &&
        comm->rank() == comm->size() - 1) {
      fmt::print(stderr, "worker: rank {} simulating a crash after epoch {}\n", comm->rank(),
                 epoch + 1);
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
  }

  const auto& stats = ddp.stats();
  if (chief && train_seconds > 0) {
    // The overlap figure only where it is measured: a synchronous (shared-memory) reduction
    // runs on the autograd thread, nothing of it is hidden, whatever the arithmetic says.
    const std::string overlap =
        stats.overlap_measured()
            ? fmt::format(", {:.0f}% hidden behind backward", 100 * stats.overlap_fraction())
            : "";
    fmt::print(
        "worker: trained {} samples in {:.1f} s: {:.0f} samples/s; all-reduce {:.1f} ms/step{}\n",
        train_samples, train_seconds, train_samples / train_seconds,
        stats.iterations ? 1000 * stats.comm_busy_s / stats.iterations : 0.0, overlap);
  }
  if (!options.dump_params.empty()) dump_parameters(options.dump_params, *model, comm->rank());
  if (chief && !options.summary_json.empty()) {
    nlohmann::json summary = {
        {"world_size", comm->size()},
        {"backend", comm->backend_name()},
        {"threads", at::get_num_threads()},
        {"train_samples", train_samples},
        {"train_seconds", train_seconds},
        {"samples_per_second", train_seconds > 0 ? train_samples / train_seconds : 0.0},
        {"cpu_ms_per_1k_samples_per_rank",
         // NOLINTNEXTLINE(bugprone-integer-division): exact, each step adds len * size() samples.
         train_samples > 0 ? 1e6 * train_cpu_seconds / (train_samples / comm->size()) : 0.0},
        {"test_accuracy", options.evaluate ? nlohmann::json(last_accuracy) : nlohmann::json()},
        {"allreduce_busy_s", stats.comm_busy_s},
        {"allreduce_exposed_s", stats.comm_exposed_s},
        {"overlap_fraction",
         stats.overlap_measured() ? nlohmann::json(stats.overlap_fraction()) : nlohmann::json()},
        {"buckets", ddp.bucket_count()}};
    std::ofstream(options.summary_json) << summary.dump(2) << "\n";
  }
  comm->barrier();
  return 0;
}

}  // namespace ddp::examples
