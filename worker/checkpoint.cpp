// SPDX-License-Identifier: MIT
#include "worker/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize.h>

namespace ddp::worker {
namespace {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, TrainingProgress progress,
                     Communicator& communicator) {
  if (communicator.rank() == 0) {
    const std::filesystem::path target(path);
    if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive, optimizer_archive;
    module.save(model_archive);
    optimizer.save(optimizer_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("epoch", torch::tensor(progress.epoch));
    archive.write("step", torch::tensor(progress.step));
    archive.save_to(tmp);
    fsync_path(tmp);
    std::filesystem::rename(tmp, target);
    if (target.has_parent_path()) fsync_path(target.parent_path().string());
  }
  communicator.barrier();
}

std::optional<TrainingProgress> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  // Load straight onto the model's device (cuda:LOCAL_RANK under NCCL), so parameters keep
  // their device and identity (DDP's hooks stay attached).
  const auto params = module.parameters();
  c10::optional<torch::Device> device;  // c10::optional: std::optional in 2.x, its own type in 1.13
  if (!params.empty()) device = params.front().device();
  torch::serialize::InputArchive archive;
  archive.load_from(path, device);
  torch::serialize::InputArchive model_archive, optimizer_archive;
  archive.read("model", model_archive);
  archive.read("optimizer", optimizer_archive);
  module.load(model_archive);
  optimizer.load(optimizer_archive);
  torch::Tensor epoch, step;
  archive.read("epoch", epoch);
  archive.read("step", step);
  return TrainingProgress{epoch.item<int64_t>(), step.item<int64_t>()};
}

}  // namespace ddp::worker
