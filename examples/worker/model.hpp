// SPDX-License-Identifier: MIT
#pragma once
/// The example's classifier, the CNN of the Python baseline (docs/worker.md): conv3x3 1->16 +
/// BN + ReLU + maxpool, conv3x3 16->32 + BN + ReLU + maxpool, linear 1568->10.

#include <torch/nn/modules/container/sequential.h>

namespace ddp::examples {

torch::nn::Sequential make_fashion_cnn();

}  // namespace ddp::examples
