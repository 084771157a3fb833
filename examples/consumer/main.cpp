// SPDX-License-Identifier: MIT
// The smallest DDP program on ddprun's worker library, built against the installed package:
// process group from the launcher's environment, a model with SyncBatchNorm in DDP, a
// DistributedSampler driving torch::data::make_data_loader, all_gather, a checkpoint.
// Run it under ddprun: `ddprun --nproc_per_node=2 consumer [checkpoint path]`.
#include <torch/torch.h>
#include <ddprun/worker/checkpoint.hpp>
#include <ddprun/worker/communicator.hpp>
#include <ddprun/worker/ddp.hpp>
#include <ddprun/worker/distributed_sampler.hpp>
#include <ddprun/worker/error_file.hpp>
#include <ddprun/worker/sync_batch_norm.hpp>
#include <ddprun/worker/worker_env.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  const auto env = ddp::worker::worker_env_from_environment();
  return ddp::worker::run_reporting_errors(env.error_file, [&] {
    torch::set_num_threads(1);
    auto comm = ddp::worker::connect_communicator(env, {});

    torch::manual_seed(0);
    auto model = torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                       torch::nn::ReLU(), torch::nn::Linear(8, 2));
    const int synced = ddp::worker::convert_sync_batchnorm(*model, comm);
    ddp::worker::DistributedDataParallel ddp(model.ptr(), comm);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));

    // 64 samples of a separable problem; each rank sees its share through the sampler.
    auto x = torch::randn({64, 4});
    auto y = (x.sum(1) > 0).to(torch::kLong);
    ddp::worker::DistributedSampler sampler(64, comm->size(), comm->rank(), true, 0);
    auto loader = torch::data::make_data_loader(
        torch::data::datasets::TensorDataset(torch::cat({x, y.unsqueeze(1).to(torch::kFloat)}, 1))
            .map(torch::data::transforms::Stack<torch::data::TensorExample>()),
        sampler, torch::data::DataLoaderOptions().batch_size(8));
    double loss_value = 0;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      sampler.set_epoch(epoch);
      for (auto& batch : *loader) {
        auto inputs = batch.data.narrow(1, 0, 4);
        auto targets = batch.data.select(1, 4).to(torch::kLong);
        optimizer.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model->forward(inputs), targets);
        loss.backward();
        optimizer.step();
        loss_value = loss.item<double>();
      }
    }
    // Every rank's final loss, gathered; the parameters are the same everywhere (DDP).
    const auto losses = comm->all_gather(torch::tensor({loss_value}, torch::kDouble));
    if (argc > 1) {
      const ddp::worker::CheckpointIdentity identity{env.run_id, comm->size(),
                                                     "consumer synthetic 64",
                                                     ddp::worker::model_fingerprint(*model)};
      ddp::worker::save_checkpoint(argv[1], *model, optimizer, {3, 0}, identity, *comm);
    }
    if (comm->rank() == 0) {
      std::printf("consumer: %d ranks, backend %s, %d SyncBatchNorm layers, losses", comm->size(),
                  comm->backend_name().c_str(), synced);
      for (const auto& l : losses) std::printf(" %.4f", l.item<double>());
      std::printf("; ok\n");
    }
    comm->barrier();
    return 0;
  });
}
