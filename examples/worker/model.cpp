// SPDX-License-Identifier: MIT
#include "examples/worker/model.hpp"

#include <torch/nn.h>

namespace ddp::examples {

torch::nn::Sequential make_fashion_cnn() {
  namespace nn = torch::nn;
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)), nn::BatchNorm2d(16), nn::ReLU(),
      nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)), nn::BatchNorm2d(32),
      nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(32 * 7 * 7, 10));
}

}  // namespace ddp::examples
