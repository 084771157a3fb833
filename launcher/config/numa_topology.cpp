// SPDX-License-Identifier: MIT
#include "launcher/config/numa_topology.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace ddp::launcher {
namespace {

namespace fs = std::filesystem;

std::string read_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<int> read_int(const fs::path& path) {
  std::string text = read_line(path);
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

/// "node12" → 12, "cpu3" → 3.
std::optional<int> numbered(const std::string& name, std::string_view stem) {
  if (name.rfind(stem, 0) != 0 || name.size() == stem.size()) return std::nullopt;
  int value = 0;
  auto [end, ec] = std::from_chars(name.data() + stem.size(), name.data() + name.size(), value);
  if (ec != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return value;
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  std::stringstream in{std::string(text)};
  for (std::string part; std::getline(in, part, ',');) {
    int lo = 0, hi = 0;
    auto dash = part.find('-');
    auto first = std::from_chars(
        part.data(), part.data() + (dash == std::string::npos ? part.size() : dash), lo);
    if (first.ec != std::errc()) continue;
    hi = lo;
    if (dash != std::string::npos &&
        std::from_chars(part.data() + dash + 1, part.data() + part.size(), hi).ec != std::errc()) {
      continue;
    }
    for (int c = lo; c <= hi && c - lo < 1'000'000; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

NumaTopology read_numa_topology(const fs::path& root) {
  NumaTopology topo;
  std::error_code ec;
  const fs::path nodes = root / "sys/devices/system/node";
  const auto online = parse_cpu_list(read_line(root / "sys/devices/system/cpu/online"));
  const std::set<int> online_set(online.begin(), online.end());
  for (const auto& entry : fs::directory_iterator(nodes, ec)) {
    auto node = numbered(entry.path().filename().string(), "node");
    if (!node) continue;
    std::vector<int> cpus;
    for (int cpu : parse_cpu_list(read_line(entry.path() / "cpulist"))) {
      if (online_set.empty() || online_set.count(cpu)) cpus.push_back(cpu);
    }
    topo.node_cpus[*node] = cpus;
  }
  for (int cpu : online) {
    const fs::path dir = root / fmt::format("sys/devices/system/cpu/cpu{}", cpu);
    if (auto package = read_int(dir / "topology/physical_package_id"))
      topo.cpu_package[cpu] = *package;
    auto l3 = parse_cpu_list(read_line(dir / "cache/index3/shared_cpu_list"));
    if (!l3.empty()) topo.cpu_l3[cpu] = l3;
  }
  // NVIDIA's driver lists its GPUs by PCI address; sysfs gives each address's NUMA node.
  std::vector<std::string> bus_ids;
  for (const auto& entry : fs::directory_iterator(root / "proc/driver/nvidia/gpus", ec)) {
    bus_ids.push_back(entry.path().filename().string());
  }
  std::sort(bus_ids.begin(), bus_ids.end());
  for (const auto& bus : bus_ids) {
    std::string lower = bus;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    topo.gpu_nodes.push_back(
        read_int(root / "sys/bus/pci/devices" / lower / "numa_node").value_or(-1));
  }
  return topo;
}

}  // namespace ddp::launcher
