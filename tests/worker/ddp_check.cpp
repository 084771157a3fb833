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
//   collectives: all_reduce SUM/MAX/MIN/AVG, all_gather, reduce_scatter and a uint8 broadcast
//     through the communicator (shared memory or Gloo) equal the same operation run directly on
//     the Gloo process group (process_group()).
//   custom [accumulate]: as equivalence, on a custom module tree with BatchNorms nested in
//     typed members (SyncBatchNorm), a ModuleList and Sequentials inside custom modules;
//     convert_sync_batchnorm also refuses (unchanged) a tree with a plain typed BatchNorm.
// Exit 0 when every check passes; the failing check is named on stderr otherwise.
#include <torch/torch.h>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <filesystem>

#include "ddprun/worker/checkpoint.hpp"
#include "ddprun/worker/communicator.hpp"
#include "ddprun/worker/ddp.hpp"
#include "ddprun/worker/process_group.hpp"
#include "ddprun/worker/sync_batch_norm.hpp"
#include "ddprun/worker/worker_env.hpp"

namespace {

using ddp::worker::Communicator;

constexpr int kBatch = 4;
const int kSteps = std::getenv("DDP_CHECK_STEPS") ? std::atoi(std::getenv("DDP_CHECK_STEPS")) : 4;

torch::nn::Sequential make_model() {
  torch::manual_seed(7);
  namespace nn = torch::nn;
  auto model =
      nn::Sequential(nn::Linear(6, 12), nn::BatchNorm1d(12), nn::ReLU(), nn::Linear(12, 12),
                     nn::BatchNorm1d(12), nn::Tanh(), nn::Linear(12, 3));
  model->to(torch::kDouble);
  return model;
}

namespace nn = torch::nn;

/// A custom block: a typed SyncBatchNorm member (BatchNorm until converted) and a Sequential
/// holding a plain BatchNorm1d (swapped by the conversion).
struct BlockImpl : nn::Module {
  BlockImpl() {
    linear = register_module("linear", nn::Linear(6, 10));
    norm = register_module("norm", ddp::worker::SyncBatchNorm(nn::BatchNormOptions(10)));
    tail = register_module("tail",
                           nn::Sequential(nn::Linear(10, 10), nn::BatchNorm1d(10), nn::ReLU()));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return tail->forward(torch::tanh(norm->forward(linear->forward(x))));
  }
  nn::Linear linear{nullptr};
  ddp::worker::SyncBatchNorm norm{nullptr};
  nn::Sequential tail{nullptr};
};
TORCH_MODULE(Block);

/// A custom module inside a Sequential, holding a Sequential with a cumulative-average BatchNorm1d.
struct InnerImpl : nn::Module {
  InnerImpl() {
    seq = register_module(
        "seq", nn::Sequential(nn::BatchNorm1d(nn::BatchNormOptions(8).momentum(c10::nullopt)),
                              nn::ReLU()));
  }
  torch::Tensor forward(const torch::Tensor& x) { return seq->forward(x); }
  nn::Sequential seq{nullptr};
};
TORCH_MODULE(Inner);

/// The tree: custom module -> custom block; a ModuleList of SyncBatchNorms called by cast; a
/// Sequential -> custom module -> Sequential with a BatchNorm1d (momentum unset).
struct NetImpl : nn::Module {
  NetImpl() {
    block = register_module("block", Block());
    norms = register_module(
        "norms",
        nn::ModuleList(ddp::worker::SyncBatchNorm(nn::BatchNormOptions(10).momentum(0.3))));
    deep = register_module("deep", nn::Sequential(nn::Linear(10, 8), Inner(), nn::Linear(8, 3)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = block->forward(x);
    h = norms->ptr<ddp::worker::SyncBatchNormImpl>(0)->forward(h);
    return deep->forward(h);
  }
  Block block{nullptr};
  nn::ModuleList norms{nullptr};
  nn::Sequential deep{nullptr};
};
TORCH_MODULE(Net);

/// A module whose plain BatchNorm is a typed member: convert_sync_batchnorm must refuse it.
struct TypedImpl : nn::Module {
  TypedImpl() {
    seq = register_module("seq", nn::Sequential(nn::BatchNorm1d(4)));
    bn = register_module("bn", nn::BatchNorm1d(4));
  }
  nn::Sequential seq{nullptr};
  nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Typed);

/// A model as the checks use it: the module (for parameters) and its forward.
struct Model {
  std::shared_ptr<nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

Model make_any_model(bool custom) {
  if (!custom) {
    auto seq = make_model();
    return {seq.ptr(), [seq](const torch::Tensor& x) mutable { return seq->forward(x); }};
  }
  torch::manual_seed(7);
  Net net;
  net->to(torch::kDouble);
  return {net.ptr(), [net](const torch::Tensor& x) mutable { return net->forward(x); }};
}

/// All-reduces a "this rank failed" flag so every rank agrees on the verdict.
bool all_ok(Communicator& comm, bool ok) {
  auto flag = torch::tensor({ok ? 0.0 : 1.0}, torch::kDouble);
  comm.all_reduce_sum(flag);
  return flag.item<double>() == 0.0;
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, (a[i] - b[i]).abs().max().item<double>());
  return diff;
}

int check_equivalence(const std::shared_ptr<Communicator>& comm, int accumulate, bool custom) {
  const int n = comm->size(), r = comm->rank();
  const int micro_steps = kSteps * accumulate;
  torch::manual_seed(99);
  const auto x = torch::randn({micro_steps * n * kBatch, 6}, torch::kDouble);
  const auto y = torch::randint(0, 3, {micro_steps * n * kBatch}, torch::kLong);

  auto wrapped = make_any_model(custom);
  auto& model = wrapped.module;
  const int converted = ddp::worker::convert_sync_batchnorm(*model, comm);
  if (converted != (custom ? 4 : 2)) {
    std::fprintf(stderr, "ddp_check: FAIL convert_sync_batchnorm converted %d layers\n", converted);
    return 1;
  }
  ddp::worker::DdpOptions options;
  options.bucket_cap_bytes = 512;  // several buckets, so the in-order launch path is exercised
  options.first_bucket_bytes = 256;
  ddp::worker::DistributedDataParallel ddp(model, comm, options);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < micro_steps; ++s) {
    const auto xs = x.narrow(0, (s * n + r) * kBatch, kBatch);
    const auto ys = y.narrow(0, (s * n + r) * kBatch, kBatch);
    const bool last_micro = (s + 1) % accumulate == 0;
    auto loss = torch::nn::functional::cross_entropy(wrapped.forward(xs), ys);
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
    auto ref_model = make_any_model(custom);  // unconverted: plain BatchNorm in one process
    auto& ref = ref_model.module;
    torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < micro_steps; ++s) {
      const auto xs = x.narrow(0, s * n * kBatch, n * kBatch);
      const auto ys = y.narrow(0, s * n * kBatch, n * kBatch);
      torch::nn::functional::cross_entropy(ref_model.forward(xs), ys).backward();
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
    std::printf(
        "ddp_check: equivalence (%s model) N=%d accumulate=%d buckets=%zu max |diff| = %.3g\n",
        custom ? "custom" : "sequential", n, accumulate, ddp.bucket_count(), diff);
    ok = diff < 1e-9;
    if (!ok)
      std::fprintf(stderr,
                   "ddp_check: FAIL DDP parameters differ from one process with batch N*B\n");
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
  const double diff =
      max_diff({ys.detach(), xs.grad(), grad_w, grad_b, sync->running_mean, sync->running_var},
               {yf.detach().narrow(0, begin, len), xf.grad().narrow(0, begin, len),
                bn->weight.grad(), bn->bias.grad(), bn->running_mean, bn->running_var});
  std::printf("ddp_check: syncbn rank %d max |diff| = %.3g\n", r, diff);
  const bool ok = diff < 1e-9;
  if (!ok)
    std::fprintf(stderr,
                 "ddp_check: FAIL SyncBatchNorm differs from BatchNorm2d on the whole batch\n");
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
  const ddp::worker::CheckpointIdentity identity{"test", comm->size(), "data",
                                                 ddp::worker::model_fingerprint(*model)};
  ddp::worker::save_checkpoint(dir + "/ck.rank" + std::to_string(r) + ".pt", *model, opt, {3, 42},
                               identity, *comm);
  int files = 0;
  bool ok = true;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    ok = ok && entry.path().filename() == "ck.rank0.pt";
  }
  if (!ok || files != 1) {
    std::fprintf(stderr, "ddp_check: FAIL expected only ck.rank0.pt in %s (found %d files)\n",
                 dir.c_str(), files);
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

/// convert_sync_batchnorm refuses a plain BatchNorm typed member, naming it, and changes nothing.
bool refuses_typed_batch_norm(const std::shared_ptr<Communicator>& comm) {
  Typed typed;
  try {
    ddp::worker::convert_sync_batchnorm(*typed, comm);
  } catch (const std::invalid_argument& e) {
    const bool named = std::string(e.what()).find("'bn'") != std::string::npos;
    const bool unchanged = typed->seq->ptr(0)->as<nn::BatchNorm1dImpl>() != nullptr;
    if (!named || !unchanged) std::fprintf(stderr, "ddp_check: FAIL refusal: %s\n", e.what());
    return named && unchanged;
  }
  std::fprintf(stderr, "ddp_check: FAIL a typed torch::nn::BatchNorm1d member was not refused\n");
  return false;
}

c10d::AllreduceOptions reduce_options(c10d::ReduceOp op) {
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  return options;
}

/// Rank-dependent integer-valued data: sums are exact in float, so any summation order agrees.
torch::Tensor rank_data(int rank, int64_t n, torch::ScalarType dtype) {
  auto gen = torch::arange(n, torch::kInt64);
  return ((gen * (rank + 3) + rank * 7) % 23 - 11).to(dtype);
}

int check_collectives(const std::shared_ptr<Communicator>& comm) {
  using ddp::worker::ReduceOp;
  const int n = comm->size(), r = comm->rank();
  auto pg = ddp::worker::process_group(*comm);
  if (!pg) {
    std::fprintf(stderr, "ddp_check: FAIL process_group() returned no group\n");
    return 1;
  }
  bool ok = true;
  int checked = 0;
  auto expect = [&](bool condition, const std::string& what) {
    ++checked;
    if (!condition) {
      ok = false;
      std::fprintf(stderr, "ddp_check: FAIL rank %d: %s\n", r, what.c_str());
    }
  };
  const std::vector<std::pair<ReduceOp, c10d::ReduceOp>> ops = {
      {ReduceOp::Sum, c10d::ReduceOp::SUM},
      {ReduceOp::Max, c10d::ReduceOp::MAX},
      {ReduceOp::Min, c10d::ReduceOp::MIN}};
  const char* op_names[] = {"SUM", "MAX", "MIN"};
  // 7 elements: the shared-memory path when it is on; 300000 floats (1.2 MB) exceed its slot.
  for (const int64_t size : {int64_t{7}, int64_t{300000}}) {
    for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong}) {
      for (std::size_t k = 0; k < ops.size(); ++k) {
        auto ours = rank_data(r, size, dtype);
        comm->all_reduce(ours, ops[k].first);
        std::vector<torch::Tensor> gloo{rank_data(r, size, dtype)};
        pg->allreduce(gloo, reduce_options(ops[k].second))->wait();
        expect(torch::equal(ours, gloo[0]), std::string("all_reduce ") + op_names[k] + " " +
                                                c10::toString(dtype) + " x" + std::to_string(size));
      }
      if (dtype != torch::kLong) {
        auto ours = rank_data(r, size, dtype);
        comm->all_reduce(ours, ReduceOp::Avg);
        std::vector<torch::Tensor> gloo{rank_data(r, size, dtype)};
        pg->allreduce(gloo, reduce_options(c10d::ReduceOp::SUM))->wait();
        expect(torch::allclose(ours, gloo[0] / n),
               std::string("all_reduce AVG ") + c10::toString(dtype));
      }
    }
  }
  // Non-integer doubles: the shared-memory sum is in rank order, Gloo's too for these sizes.
  {
    torch::manual_seed(100 + r);
    auto x = torch::randn({33}, torch::kDouble);
    auto ours = x.clone();
    comm->all_reduce(ours, ReduceOp::Sum);
    std::vector<torch::Tensor> gloo{x.clone()};
    pg->allreduce(gloo)->wait();
    expect(torch::allclose(ours, gloo[0], 1e-12, 1e-12), "all_reduce SUM random doubles");
  }
  bool avg_refused = false;
  try {
    auto ints = rank_data(r, 3, torch::kLong);
    comm->all_reduce(ints, ReduceOp::Avg);
  } catch (const std::invalid_argument&) {
    avg_refused = true;
  }
  expect(avg_refused, "all_reduce AVG of int64 should be refused");
  // all_gather: every rank's tensor, in rank order, as Gloo's allgather.
  for (const auto dtype : {torch::kFloat, torch::kLong}) {
    const auto mine = rank_data(r, 10, dtype).view({2, 5});
    const auto ours = comm->all_gather(mine);
    std::vector<std::vector<torch::Tensor>> gloo(1);
    for (int k = 0; k < n; ++k) gloo[0].push_back(torch::empty_like(mine));
    std::vector<torch::Tensor> input{mine};
    pg->allgather(gloo, input)->wait();
    bool same = static_cast<int>(ours.size()) == n;
    for (int k = 0; same && k < n; ++k) {
      same =
          torch::equal(ours[static_cast<std::size_t>(k)], gloo[0][static_cast<std::size_t>(k)]) &&
          torch::equal(ours[static_cast<std::size_t>(k)], rank_data(k, 10, dtype).view({2, 5}));
    }
    expect(same, std::string("all_gather ") + c10::toString(dtype));
  }
  // reduce_scatter: this rank's slice of Gloo's full all-reduce.
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto input = rank_data(r, n * 3 * 4, torch::kFloat).view({n * 3, 4});
    const auto ours = comm->reduce_scatter(input, ops[k].first);
    std::vector<torch::Tensor> gloo{input.clone()};
    pg->allreduce(gloo, reduce_options(ops[k].second))->wait();
    expect(torch::equal(ours, gloo[0].narrow(0, r * 3, 3)),
           std::string("reduce_scatter ") + op_names[k]);
  }
  // uint8 broadcast (how checkpoints travel to ranks without the file).
  auto bytes = r == 0 ? torch::arange(200, torch::kLong).to(torch::kUInt8)
                      : torch::zeros({200}, torch::kUInt8);
  comm->broadcast(bytes, 0);
  expect(torch::equal(bytes, torch::arange(200, torch::kLong).to(torch::kUInt8)),
         "uint8 broadcast");
  std::printf("ddp_check: collectives (%s) rank %d: %d checks against gloo, %s\n",
              comm->backend_name().c_str(), r, checked, ok ? "all equal" : "FAILED");
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
      std::fprintf(stderr, "ddp_check: error: backend %s, expected %s\n",
                   comm->backend_name().c_str(), want);
      return 1;
    }
    if (mode == "equivalence")
      return check_equivalence(comm, argc > 2 ? std::atoi(argv[2]) : 1, false);
    if (mode == "custom") {
      if (!refuses_typed_batch_norm(comm)) return 1;
      return check_equivalence(comm, argc > 2 ? std::atoi(argv[2]) : 1, true);
    }
    if (mode == "collectives") return check_collectives(comm);
    if (mode == "syncbn") return check_sync_batch_norm(comm);
    if (mode == "checkpoint" && argc > 2) return check_checkpoint(comm, argv[2]);
    std::fprintf(stderr,
                 "usage: ddp_check equivalence [accumulate] | custom [accumulate] | syncbn | "
                 "collectives | checkpoint DIR\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_check: error: %s\n", e.what());
    return 1;
  }
}
