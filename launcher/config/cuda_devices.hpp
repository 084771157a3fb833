// SPDX-License-Identifier: MIT
#pragma once
/// Which GPUs a job may use, without linking CUDA: CUDA_VISIBLE_DEVICES when it is set, else the
/// devices the NVIDIA driver exposes under /proc and /dev.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

/// Parses CUDA_VISIBLE_DEVICES the way the CUDA runtime does: comma-separated indices, GPU-<uuid>
/// or MIG-<id> entries; the list ends at the first entry that is none of these (so "-1" or ""
/// means no device). Returns the visible entries, in order.
std::vector<std::string> parse_visible_devices(std::string_view value);

/// GPUs the driver exposes below `root` (normally "/"): entries of proc/driver/nvidia/gpus, or
/// else dev/nvidia<N> device nodes. 0 when there is no NVIDIA driver.
int count_driver_gpus(const std::filesystem::path& root = "/");

/// The devices a job sees: the parsed CUDA_VISIBLE_DEVICES if set, else "0".."n-1" for the
/// driver's n GPUs.
std::vector<std::string> visible_gpus(const std::optional<std::string>& cuda_visible_devices,
                                      int driver_gpu_count);

}  // namespace ddp::launcher
