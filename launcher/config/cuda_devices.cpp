// SPDX-License-Identifier: MIT
#include "launcher/config/cuda_devices.hpp"

#include <algorithm>
#include <cctype>
#include <system_error>

namespace ddp::launcher {
namespace {

std::string_view trim_whitespace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

bool is_device_entry(std::string_view entry) {
  if (all_digits(entry)) return true;
  // UUIDs may be abbreviated (any unique prefix), so only the tag and a non-empty rest are checked.
  for (std::string_view tag : {"GPU-", "MIG-"}) {
    if (entry.size() > tag.size() && entry.substr(0, tag.size()) == tag) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> parse_visible_devices(std::string_view value) {
  std::vector<std::string> devices;
  if (trim_whitespace(value).empty()) return devices;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    auto entry = trim_whitespace(
        value.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (!is_device_entry(entry)) break;  // CUDA ignores this entry and everything after it
    devices.emplace_back(entry);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return devices;
}

int count_driver_gpus(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int count = 0;
  fs::path proc_gpus = root / "proc/driver/nvidia/gpus";
  if (fs::is_directory(proc_gpus, ec)) {
    for (auto it = fs::directory_iterator(proc_gpus, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      ++count;
    }
    if (count > 0) return count;
  }
  fs::path dev = root / "dev";
  for (auto it = fs::directory_iterator(dev, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        all_digits(std::string_view(name).substr(6))) {
      ++count;
    }
  }
  return count;
}

std::vector<std::string> visible_gpus(const std::optional<std::string>& cuda_visible_devices,
                                      int driver_gpu_count) {
  if (cuda_visible_devices) return parse_visible_devices(*cuda_visible_devices);
  std::vector<std::string> devices;
  devices.reserve(static_cast<std::size_t>(std::max(driver_gpu_count, 0)));
  for (int i = 0; i < driver_gpu_count; ++i) devices.push_back(std::to_string(i));
  return devices;
}

}  // namespace ddp::launcher
