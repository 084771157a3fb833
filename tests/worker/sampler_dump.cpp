// SPDX-License-Identifier: MIT
// Prints, as JSON, the indices ddp::worker::DistributedSampler yields for the configurations
// given as arguments "size,replicas,shuffle,drop_last,seed,epochs" (one line per rank and
// epoch). sampler_parity.py compares them with PyTorch's DistributedSampler.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "worker/distributed_sampler.hpp"

int main(int argc, char** argv) {
  nlohmann::json out = nlohmann::json::array();
  for (int a = 1; a < argc; ++a) {
    std::stringstream in(argv[a]);
    std::string field;
    std::vector<long long> v;
    while (std::getline(in, field, ',')) v.push_back(std::stoll(field));
    if (v.size() != 6) {
      std::fprintf(stderr, "sampler_dump: expected size,replicas,shuffle,drop_last,seed,epochs: %s\n", argv[a]);
      return 2;
    }
    for (int rank = 0; rank < v[1]; ++rank) {
      ddp::worker::DistributedSampler sampler(v[0], static_cast<int>(v[1]), rank, v[2] != 0,
                                              static_cast<uint64_t>(v[4]), v[3] != 0);
      for (int epoch = 0; epoch < v[5]; ++epoch) {
        sampler.set_epoch(epoch);
        out.push_back({{"config", argv[a]}, {"rank", rank}, {"epoch", epoch},
                       {"num_samples", sampler.num_samples()}, {"indices", sampler.indices()}});
      }
    }
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
