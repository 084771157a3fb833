// SPDX-License-Identifier: MIT
// Prints, as JSON, the indices ddp::worker::DistributedSampler yields for the configurations
// given as arguments "size,replicas,shuffle,drop_last,seed,epochs" (one line per rank and
// epoch). sampler_parity.py compares them with PyTorch's DistributedSampler.
// With --loader first, the indices are what torch::data::make_data_loader yields with the
// sampler (batch size 3, each example carrying its index), epoch by epoch through set_epoch.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <torch/data.h>

#include "ddprun/worker/distributed_sampler.hpp"

namespace {

/// Example i is the tensor {i}: a batch says which indices the loader asked for.
class IndexDataset : public torch::data::datasets::Dataset<IndexDataset, torch::Tensor> {
 public:
  explicit IndexDataset(size_t size) : size_(size) {}
  torch::Tensor get(size_t index) override { return torch::tensor({static_cast<int64_t>(index)}); }
  torch::optional<size_t> size() const override { return size_; }

 private:
  size_t size_;
};

std::vector<int64_t> loader_indices(
    ddp::worker::DistributedSampler& sampler,
    std::unique_ptr<
        torch::data::StatelessDataLoader<IndexDataset, ddp::worker::DistributedSampler>>& loader) {
  std::vector<int64_t> out;
  for (auto& batch : *loader) {
    if (batch.size() > 3) throw std::runtime_error("batch larger than 3");
    for (auto& example : batch) out.push_back(example.item<int64_t>());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  nlohmann::json out = nlohmann::json::array();
  bool through_loader = argc > 1 && std::string(argv[1]) == "--loader";
  for (int a = through_loader ? 2 : 1; a < argc; ++a) {
    std::stringstream in(argv[a]);
    std::string field;
    std::vector<long long> v;
    while (std::getline(in, field, ',')) v.push_back(std::stoll(field));
    if (v.size() != 6) {
      std::fprintf(stderr,
                   "sampler_dump: expected size,replicas,shuffle,drop_last,seed,epochs: %s\n",
                   argv[a]);
      return 2;
    }
    for (int rank = 0; rank < v[1]; ++rank) {
      ddp::worker::DistributedSampler sampler(v[0], static_cast<int>(v[1]), rank, v[2] != 0,
                                              static_cast<uint64_t>(v[4]), v[3] != 0);
      auto loader = torch::data::make_data_loader(IndexDataset(static_cast<size_t>(v[0])), sampler,
                                                  torch::data::DataLoaderOptions().batch_size(3));
      for (int epoch = 0; epoch < v[5]; ++epoch) {
        sampler.set_epoch(epoch);  // the loader's copy shares the epoch
        out.push_back(
            {{"config", argv[a]},
             {"rank", rank},
             {"epoch", epoch},
             {"num_samples", sampler.num_samples()},
             {"indices", through_loader ? loader_indices(sampler, loader) : sampler.indices()}});
      }
    }
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
