// SPDX-License-Identifier: MIT
// Run under N ranks (ddprun or launch_local.sh). Checks, on real processes and Gloo:
//   equivalence [accumulate]: N ranks with per-rank batch B train a small BatchNorm model wrapped
//     in DDP + SyncBatchNorm; rank 0 also trains the unwrapped model (plain BatchNorm) in one
//     process on the concatenated batches of N*B. Parameters must agree (float tolerance), and
//     be bit-identical across ranks. With accumulate > 1, micro-steps but the last of each step
//     run under no_sync().
//   syncbn: SyncBatchNorm forward/backward over each rank's slice equals BatchNorm2d over the
//     whole batch (outputs, input gradients, summed weight/bias gradients).
//   checkpoint DIR: only rank 0 writes; every rank resumes rank 0's state.
// Exit 0 when every check passes; the failing check is named on stderr otherwise.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <torch/torch.h>

#include <filesystem>

#include "worker/checkpoint.hpp"
#include "worker/communicator.hpp"
#include "worker/ddp.hpp"
#include "worker/sync_batch_norm.hpp"
#include "worker/worker_env.hpp"

namespace {

using ddp::worker::Communicator;

constexpr int kBatch = 4;
const int kSteps = std::getenv("DDP_CHECK_STEPS") ? std::atoi(std::getenv("DDP_CHECK_STEPS")) : 4;

torch::nn::Sequential make_model() {
  torch::manual_seed(7);
  namespace nn = torch::nn;
  auto model = nn::Sequential(nn::Linear(6, 12), nn::BatchNorm1d(12), nn::ReLU(), nn::Linear(12, 12),
                              nn::BatchNorm1d(12), nn::Tanh(), nn::Linear(12, 3));
  model->to(torch::kDouble);
  return model;
}

/// All-reduces a "this rank failed" flag so every rank agrees on the verdict.
bool all_ok(Communicator& comm, bool ok) {
  auto flag = torch::tensor({ok ? 0.0 : 1.0}, torch::kDouble);
  comm.all_reduce_sum(flag);
  return flag.item<double>() == 0.0;
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, (a[i] - b[i]).abs().max().item<double>());
  return diff;
}

int check_equivalence(const std::shared_ptr<Communicator>& comm, int accumulate) {
  const int n = comm->size(), r = comm->rank();
  const int micro_steps = kSteps * accumulate;
  torch::manual_seed(99);
  const auto x = torch::randn({micro_steps * n * kBatch, 6}, torch::kDouble);
  const auto y = torch::randint(0, 3, {micro_steps * n * kBatch}, torch::kLong);

  auto model = make_model();
  ddp::worker::convert_sync_batchnorm(*model, comm);
  ddp::worker::DdpOptions options;
  options.bucket_cap_bytes = 512;  // several buckets, so the in-order launch path is exercised
  options.first_bucket_bytes = 256;
  ddp::worker::DistributedDataParallel ddp(model.ptr(), comm, options);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < micro_steps; ++s) {
    const auto xs = x.narrow(0, (s * n + r) * kBatch, kBatch);
    const auto ys = y.narrow(0, (s * n + r) * kBatch, kBatch);
    const bool last_micro = (s + 1) % accumulate == 0;
    auto loss = torch::nn::functional::cross_entropy(model->forward(xs), ys);
    if (last_micro) {
      loss.backward();
      opt.step();
      opt.zero_grad();
    } else {
      auto guard = ddp.no_sync();
      loss.backward();
    }
  }
  std::vector<torch::Tensor> mine;
  for (auto& p : model->parameters()) mine.push_back(p.detach().clone());
  for (auto& b : model->buffers()) mine.push_back(b.detach().to(torch::kDouble).clone());

  // Bit-identical across ranks: compare with rank 0's copy exactly.
  bool identical = true;
  for (auto& t : mine) {
    auto theirs = t.clone();
    comm->broadcast(theirs, 0);
    identical = identical && torch::equal(theirs, t);
  }
  if (!all_ok(*comm, identical)) {
    std::fprintf(stderr, "ddp_check: FAIL parameters differ between ranks\n");
    return 1;
  }

  bool ok = true;
  if (r == 0) {
    auto ref = make_model();
    torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < micro_steps; ++s) {
      const auto xs = x.narrow(0, s * n * kBatch, n * kBatch);
      const auto ys = y.narrow(0, s * n * kBatch, n * kBatch);
      torch::nn::functional::cross_entropy(ref->forward(xs), ys).backward();
      if ((s + 1) % accumulate == 0) {
        ref_opt.step();
        ref_opt.zero_grad();
      }
    }
    std::vector<torch::Tensor> expected;
    for (auto& p : ref->parameters()) expected.push_back(p.detach());
    for (auto& b : ref->buffers()) expected.push_back(b.detach().to(torch::kDouble));
    const double diff = max_diff(mine, expected);
    if (std::getenv("DDP_CHECK_VERBOSE")) {
      for (std::size_t i = 0; i < mine.size(); ++i) {
        std::printf("  tensor %zu: %.3g\n", i, (mine[i] - expected[i]).abs().max().item<double>());
      }
    }
    std::printf("ddp_check: equivalence N=%d accumulate=%d buckets=%zu max |diff| = %.3g\n", n,
                accumulate, ddp.bucket_count(), diff);
    ok = diff < 1e-9;
    if (!ok) std::fprintf(stderr, "ddp_check: FAIL DDP parameters differ from one process with batch N*B\n");
  }
  return all_ok(*comm, ok) ? 0 : 1;
}

int check_sync_batch_norm(const std::shared_ptr<Communicator>& comm) {
  const int n = comm->size(), r = comm->rank();
  torch::manual_seed(5);
  // Unequal slices on purpose (rank r holds r + 2 samples): the count must be all-reduced too.
  int total = 0;
  for (int k = 0; k < n; ++k) total += k + 2;
  const auto x = torch::randn({total, 3, 5, 4}, torch::kDouble) * 2 + 1;
  const auto g = torch::randn({total, 3, 5, 4}, torch::kDouble);
  int begin = 0;
  for (int k = 0; k < r; ++k) begin += k + 2;
  const int len = r + 2;

  torch::nn::BatchNorm2d bn(3);
  bn->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    bn->weight.uniform_(0.5, 1.5);
    bn->bias.uniform_(-0.5, 0.5);
  }
  auto sync = ddp::worker::SyncBatchNorm(torch::nn::BatchNormOptions(3), comm);
  sync->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    sync->weight.copy_(bn->weight);
    sync->bias.copy_(bn->bias);
  }
  auto xs = x.narrow(0, begin, len).clone().requires_grad_(true);
  auto ys = sync->forward(xs);
  (ys * g.narrow(0, begin, len)).sum().backward();
  auto grad_w = sync->weight.grad().clone();
  auto grad_b = sync->bias.grad().clone();
  comm->all_reduce_sum(grad_w);
  comm->all_reduce_sum(grad_b);

  auto xf = x.clone().requires_grad_(true);
  auto yf = bn->forward(xf);
  (yf * g).sum().backward();
  const double diff = max_diff(
      {ys.detach(), xs.grad(), grad_w, grad_b, sync->running_mean, sync->running_var},
      {yf.detach().narrow(0, begin, len), xf.grad().narrow(0, begin, len), bn->weight.grad(),
       bn->bias.grad(), bn->running_mean, bn->running_var});
  std::printf("ddp_check: syncbn rank %d max |diff| = %.3g\n", r, diff);
  const bool ok = diff < 1e-9;
  if (!ok) std::fprintf(stderr, "ddp_check: FAIL SyncBatchNorm differs from BatchNorm2d on the whole batch\n");
  return all_ok(*comm, ok) ? 0 : 1;
}

/// Every rank asks to save to its own path; only rank 0's may appear. Every rank then resumes
/// from it and must see rank 0's parameters and progress; no temporary file may be left.
int check_checkpoint(const std::shared_ptr<Communicator>& comm, const std::string& dir) {
  const int r = comm->rank();
  auto model = make_model();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(static_cast<double>(r));  // ranks differ
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  ddp::worker::save_checkpoint(dir + "/ck.rank" + std::to_string(r) + ".pt", *model, opt, {3, 42},
                               *comm);
  int files = 0;
  bool ok = true;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    ok = ok && entry.path().filename() == "ck.rank0.pt";
  }
  if (!ok || files != 1) {
    std::fprintf(stderr, "ddp_check: FAIL expected only ck.rank0.pt in %s (found %d files)\n", dir.c_str(), files);
    ok = false;
  }
  auto resumed = make_model();
  torch::optim::SGD resumed_opt(resumed->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto progress = ddp::worker::load_checkpoint(dir + "/ck.rank0.pt", *resumed, resumed_opt);
  auto expected = make_model();  // rank 0's parameters: the initial ones + 0
  const double diff = max_diff(resumed->parameters(), expected->parameters());
  if (!progress || progress->epoch != 3 || progress->step != 42 || diff != 0) {
    std::fprintf(stderr, "ddp_check: FAIL rank %d did not resume rank 0's checkpoint\n", r);
    ok = false;
  }
  const bool missing = !ddp::worker::load_checkpoint(dir + "/absent.pt", *resumed, resumed_opt);
  ok = ok && missing;
  std::printf("ddp_check: checkpoint rank %d ok=%d\n", r, ok ? 1 : 0);
  return all_ok(*comm, ok) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    torch::set_num_threads(1);
    const auto env = ddp::worker::worker_env_from_environment();
    ddp::worker::CommunicatorOptions options;
    options.backend = ddp::worker::Backend::Gloo;
    options.timeout = std::chrono::seconds(60);
    auto comm = ddp::worker::connect_communicator(env, options);
    // Tests pin the path they mean to exercise (gloo, or gloo+shm for the shared-memory one).
    if (const char* want = std::getenv("DDP_CHECK_BACKEND"); want && comm->backend_name() != want) {
      std::fprintf(stderr, "ddp_check: error: backend %s, expected %s\n", comm->backend_name().c_str(), want);
      return 1;
    }
    if (mode == "equivalence") return check_equivalence(comm, argc > 2 ? std::atoi(argv[2]) : 1);
    if (mode == "syncbn") return check_sync_batch_norm(comm);
    if (mode == "checkpoint" && argc > 2) return check_checkpoint(comm, argv[2]);
    std::fprintf(stderr, "usage: ddp_check equivalence [accumulate] | syncbn | checkpoint DIR\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_check: error: %s\n", e.what());
    return 1;
  }
}
