// SPDX-License-Identifier: MIT
#include "ddprun/worker/checkpoint.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize.h>
#include <atomic>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace ddp::worker {
namespace {

/// The LibTorch archive, in memory: LibTorch's own file writer throws from a destructor on a
/// full disk, so the bytes are written by write_file_atomically instead.
std::string serialize(const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                      TrainingProgress progress) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optimizer_archive;
  module.save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("epoch", torch::tensor(progress.epoch));
  archive.write("step", torch::tensor(progress.step));
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

void deserialize(const std::string& payload, torch::nn::Module& module,
                 torch::optim::Optimizer& optimizer) {
  // Load straight onto the model's device (cuda:LOCAL_RANK under NCCL), so parameters keep
  // their device and identity.
  const auto params = module.parameters();
  c10::optional<torch::Device> device;  // c10::optional: std::optional in 2.x, its own type in 1.13
  if (!params.empty()) device = params.front().device();
  torch::serialize::InputArchive archive;
  archive.load_from(payload.data(), payload.size(), device);
  torch::serialize::InputArchive model_archive, optimizer_archive;
  archive.read("model", model_archive);
  archive.read("optimizer", optimizer_archive);
  module.load(model_archive);
  optimizer.load(optimizer_archive);
}

/// Rank 0's verdict as the store carries it: "<action> <epoch> <step> <payload bytes>\n<line>".
std::string encode_plan(const ResumePlan& plan, const CheckpointHeader& header,
                        std::size_t payload_bytes) {
  const char* action = plan.action == ResumePlan::Action::Resume ? "resume"
                       : plan.action == ResumePlan::Action::Fail ? "fail"
                                                                 : "fresh";
  return std::string(action) + " " + std::to_string(header.epoch) + " " +
         std::to_string(header.step) + " " + std::to_string(payload_bytes) + "\n" + plan.line;
}

struct AgreedPlan {
  ResumePlan plan;
  TrainingProgress progress;
  std::size_t payload_bytes = 0;
};

AgreedPlan decode_plan(const std::string& text) {
  AgreedPlan out;
  const auto newline = text.find('\n');
  std::istringstream head(text.substr(0, newline));
  std::string action;
  unsigned long long bytes = 0;
  head >> action >> out.progress.epoch >> out.progress.step >> bytes;
  if (!head || (action != "resume" && action != "fail" && action != "fresh")) {
    throw std::runtime_error("checkpoint: rank 0's resume decision is unreadable: " +
                             text.substr(0, 80));
  }
  out.plan.action = action == "resume" ? ResumePlan::Action::Resume
                    : action == "fail" ? ResumePlan::Action::Fail
                                       : ResumePlan::Action::Fresh;
  out.plan.line = newline == std::string::npos ? "" : text.substr(newline + 1);
  out.payload_bytes = static_cast<std::size_t>(bytes);
  return out;
}

}  // namespace

std::string model_fingerprint(const torch::nn::Module& module) {
  std::string description;
  int64_t tensors = 0, values = 0;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    description += name + ":" + std::string(c10::toString(t.scalar_type())) + ":";
    for (const auto size : t.sizes()) description += std::to_string(size) + ",";
    description += ";";
    ++tensors;
    values += t.numel();
  };
  for (const auto& item : module.named_parameters()) add("p." + item.key(), item.value());
  for (const auto& item : module.named_buffers()) add("b." + item.key(), item.value());
  char crc[17];
  std::snprintf(crc, sizeof crc, "%016llx", static_cast<unsigned long long>(crc64(description)));
  return std::to_string(tensors) + " tensors, " + std::to_string(values) + " values, crc64 " + crc;
}

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, TrainingProgress progress,
                     const CheckpointIdentity& identity, Communicator& communicator) {
  if (communicator.rank() == 0) {
    reclaim_stale_temp_files(path);
    const std::string payload = serialize(module, optimizer, progress);
    write_file_atomically(path,
                          encode_checkpoint({identity, progress.epoch, progress.step}, payload));
  }
  communicator.barrier();
}

ResumeOutcome resume_from_checkpoint(const std::string& path, torch::nn::Module& module,
                                     torch::optim::Optimizer& optimizer,
                                     const CheckpointIdentity& identity, ResumePolicy policy,
                                     int restart_count, Communicator& communicator) {
  // Every rank calls this in the same order: the n-th call of each uses the n-th key.
  static std::atomic<int> calls{0};
  const std::string key = "ddprun_checkpoint/resume/" + std::to_string(calls++);
  AgreedPlan agreed;
  std::string payload;
  if (communicator.rank() == 0) {
    reclaim_stale_temp_files(path);
    CheckpointProbe probe;
    const bool looks =
        policy == ResumePolicy::Always || (policy == ResumePolicy::OnRestart && restart_count > 0);
    if (looks) {
      try {
        if (auto bytes = read_whole_file(path)) {
          DecodedCheckpoint decoded = decode_checkpoint(std::move(*bytes), path);
          probe.state = CheckpointProbe::State::Valid;
          probe.header = decoded.header;
          payload = std::move(decoded.payload);
        }
      } catch (const CheckpointError& e) {
        probe.state = CheckpointProbe::State::Unreadable;
        probe.problem = e.what();
      }
    }
    const ResumePlan plan = plan_resume(policy, restart_count, probe, identity, path);
    if (plan.action != ResumePlan::Action::Resume) payload.clear();
    const std::string text = encode_plan(plan, probe.header, payload.size());
    if (KeyValueStore* store = communicator.store()) store->set(key, text);
    agreed = decode_plan(text);
  } else {
    KeyValueStore* store = communicator.store();
    if (store == nullptr)
      throw std::logic_error("resume_from_checkpoint: a multi-rank communicator without a store");
    agreed = decode_plan(store->get(key));
  }
  if (agreed.plan.action == ResumePlan::Action::Fail) throw CheckpointError(agreed.plan.line);
  ResumeOutcome outcome;
  outcome.note = agreed.plan.line;
  if (agreed.plan.action == ResumePlan::Action::Fresh) return outcome;

  if (communicator.size() > 1) {
    // The bytes travel through the process group (rank 0's file only).
    at::Tensor bytes =
        communicator.rank() == 0
            ? torch::from_blob(payload.data(), {static_cast<int64_t>(payload.size())},
                               torch::kUInt8)
                  .clone()
            : torch::empty({static_cast<int64_t>(agreed.payload_bytes)}, torch::kUInt8);
    bytes = bytes.to(communicator.device());
    communicator.broadcast(bytes, 0);
    bytes = bytes.cpu().contiguous();
    payload.assign(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                   static_cast<std::size_t>(bytes.numel()));
  }
  deserialize(payload, module, optimizer);
  outcome.resumed = true;
  outcome.progress = agreed.progress;
  return outcome;
}

std::optional<TrainingProgress> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer) {
  auto bytes = read_whole_file(path);
  if (!bytes) return std::nullopt;
  const DecodedCheckpoint decoded = decode_checkpoint(std::move(*bytes), path);
  deserialize(decoded.payload, module, optimizer);
  return TrainingProgress{decoded.header.epoch, decoded.header.step};
}

}  // namespace ddp::worker
