// SPDX-License-Identifier: MIT
#pragma once
/// Fashion-MNIST from its gzipped IDX files (Debian's dataset-fashion-mnist installs them under
/// /usr/share/datasets/fashion-mnist), read with zlib, plus a generated stand-in for tests.

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace ddp::examples {

/// Images (N, 1, 28, 28) float, normalised; labels (N) int64 in [0, 10).
struct LabelledImages {
  torch::Tensor images;
  torch::Tensor labels;
  int64_t size() const { return labels.size(0); }
};

inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Reads `<dir>/<split>-images-idx3-ubyte.gz` and `<dir>/<split>-labels-idx1-ubyte.gz`
/// (split "train" or "t10k"). Throws std::runtime_error naming the missing or corrupt file.
LabelledImages load_fashion_mnist(const std::string& dir, const std::string& split);

/// A learnable 10-class stand-in of `count` images: one fixed pattern per class plus noise drawn
/// from `seed` (the same on every rank for the same seed).
LabelledImages synthetic_images(int64_t count, uint64_t seed);

}  // namespace ddp::examples
