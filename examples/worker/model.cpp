// SPDX-License-Identifier: MIT
#include "examples/worker/model.hpp"

#include <torch/nn.h>

namespace ddp::examples {

torch::nn::Sequential make_fashion_cnn() {
  namespace nn = torch::nn;
  // Layers are built one statement at a time: the order of function arguments' evaluation is
  // unspecified, and the order decides which random numbers each layer's initialisation draws.
  // In this order, torch::manual_seed(s) gives the weights Python's model gets after
  // torch.manual_seed(s).
  nn::Sequential model;
  model->push_back(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)));
  model->push_back(nn::BatchNorm2d(16));
  model->push_back(nn::ReLU());
  model->push_back(nn::MaxPool2d(2));
  model->push_back(nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)));
  model->push_back(nn::BatchNorm2d(32));
  model->push_back(nn::ReLU());
  model->push_back(nn::MaxPool2d(2));
  model->push_back(nn::Flatten());
  model->push_back(nn::Linear(32 * 7 * 7, 10));
  return model;
}

}  // namespace ddp::examples
