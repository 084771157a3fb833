// SPDX-License-Identifier: MIT
#include "examples/worker/fashion_mnist.hpp"

#include <zlib.h>

#include <torch/torch.h>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

namespace ddp::examples {
namespace {

/// The whole decompressed content of a .gz file.
std::vector<uint8_t> read_gzip(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error("Fashion-MNIST file not found: " + path +
                             " (install Debian's dataset-fashion-mnist, or pass --data DIR, or "
                             "--synthetic N for generated data)");
  }
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) throw std::runtime_error("corrupt gzip data in " + path);
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  return out;
}

uint32_t big_endian_u32(const std::vector<uint8_t>& bytes, std::size_t offset) {
  return (uint32_t{bytes[offset]} << 24) | (uint32_t{bytes[offset + 1]} << 16) |
         (uint32_t{bytes[offset + 2]} << 8) | uint32_t{bytes[offset + 3]};
}

/// IDX: magic 0x00000800 | type 0x08 (ubyte) << 0 ... | ndims; then ndims big-endian sizes.
std::vector<int64_t> idx_header(const std::vector<uint8_t>& bytes, uint32_t expected_dims,
                                const std::string& path) {
  if (bytes.size() < 4 + 4 * expected_dims ||
      big_endian_u32(bytes, 0) != (0x0800u | expected_dims)) {
    throw std::runtime_error(path + " is not an IDX file of unsigned bytes with " +
                             std::to_string(expected_dims) + " dimensions");
  }
  std::vector<int64_t> dims;
  std::size_t expected_bytes = 4 + 4 * expected_dims;
  int64_t elements = 1;
  for (uint32_t d = 0; d < expected_dims; ++d) {
    dims.push_back(big_endian_u32(bytes, 4 + 4 * d));
    elements *= dims.back();
  }
  if (bytes.size() != expected_bytes + static_cast<std::size_t>(elements)) {
    throw std::runtime_error(path + " is truncated or has trailing data");
  }
  return dims;
}

}  // namespace

LabelledImages load_fashion_mnist(const std::string& dir, const std::string& split) {
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  auto image_bytes = read_gzip(images_path);
  auto label_bytes = read_gzip(labels_path);
  const auto image_dims = idx_header(image_bytes, 3, images_path);
  const auto label_dims = idx_header(label_bytes, 1, labels_path);
  if (image_dims[0] != label_dims[0]) {
    throw std::runtime_error(images_path + " and " + labels_path + " hold different counts");
  }
  const int64_t n = image_dims[0];
  torch::Tensor raw = torch::from_blob(image_bytes.data() + 16,
                                       {n, 1, image_dims[1], image_dims[2]}, torch::kUInt8);
  LabelledImages out;
  out.images =
      ((raw.to(torch::kFloat) / 255.0 - kFashionMnistMean) / kFashionMnistStd).contiguous();
  out.labels = torch::from_blob(label_bytes.data() + 8, {n}, torch::kUInt8).to(torch::kLong);
  return out;
}

LabelledImages synthetic_images(int64_t count, uint64_t seed) {
  torch::NoGradGuard no_grad;
  // The class patterns are fixed, so training and test sets of different seeds agree on them.
  auto pattern_generator = at::detail::createCPUGenerator(20240917);
  const torch::Tensor patterns = torch::randn({10, 1, 28, 28}, pattern_generator);
  auto generator = at::detail::createCPUGenerator(seed);
  LabelledImages out;
  out.labels = torch::randint(0, 10, {count}, generator, torch::kLong);
  out.images =
      (patterns.index_select(0, out.labels) + 1.5 * torch::randn({count, 1, 28, 28}, generator))
          .contiguous();
  return out;
}

}  // namespace ddp::examples
