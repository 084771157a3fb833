// SPDX-License-Identifier: MIT
// Value parsers, CUDA_VISIBLE_DEVICES and the driver GPU count.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "launcher/common/value_parsers.hpp"
#include "launcher/config/cuda_devices.hpp"

using namespace ddp::launcher;

TEST_CASE("CUDA_VISIBLE_DEVICES: indices, GPU uuids, MIG ids, empty and invalid entries") {
  using V = std::vector<std::string>;
  CHECK(parse_visible_devices("0,1,2") == V{"0", "1", "2"});
  CHECK(parse_visible_devices(" 3 , 1 ") == V{"3", "1"});
  CHECK(parse_visible_devices("GPU-8f3e2a1b-0000-1111-2222-333344445555,1") ==
        V{"GPU-8f3e2a1b-0000-1111-2222-333344445555", "1"});
  CHECK(parse_visible_devices("MIG-4b1a2c3d-aaaa-bbbb-cccc-ddddeeeeffff") ==
        V{"MIG-4b1a2c3d-aaaa-bbbb-cccc-ddddeeeeffff"});
  CHECK(parse_visible_devices("").empty());
  CHECK(parse_visible_devices("-1").empty());
  CHECK(parse_visible_devices("NoDevFiles").empty());
  CHECK(parse_visible_devices("0,-1,2") == V{"0"});  // CUDA stops at the first invalid entry
  CHECK(visible_gpus(std::nullopt, 2) == V{"0", "1"});
  CHECK(visible_gpus(std::string(""), 4).empty());
}

TEST_CASE("driver GPU count from /proc/driver/nvidia/gpus or /dev/nvidiaN") {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("ddprun_gpu_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "dev");
  CHECK(count_driver_gpus(root) == 0);
  for (const char* name : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset"}) {
    std::ofstream(root / "dev" / name) << "";
  }
  CHECK(count_driver_gpus(root) == 2);
  fs::create_directories(root / "proc/driver/nvidia/gpus/0000:01:00.0");
  fs::create_directories(root / "proc/driver/nvidia/gpus/0000:02:00.0");
  fs::create_directories(root / "proc/driver/nvidia/gpus/0000:03:00.0");
  CHECK(count_driver_gpus(root) == 3);
  fs::remove_all(root);
}

TEST_CASE("--nnodes ranges") {
  CHECK(*parse_node_range("1") == NodeRange{1, 1});
  CHECK(*parse_node_range("2:4") == NodeRange{2, 4});
  CHECK_FALSE(parse_node_range("4:2").ok());
  CHECK_FALSE(parse_node_range("0:2").ok());
  CHECK_FALSE(parse_node_range("").ok());
  CHECK_FALSE(parse_node_range("1:").ok());
}

TEST_CASE("--redirects / --tee values") {
  auto all = parse_stream_spec("--tee", "3");
  REQUIRE(all.ok());
  CHECK(all->for_rank(7) == StreamSet::All);
  auto map = parse_stream_spec("--tee", "0:1,1:2");
  REQUIRE(map.ok());
  CHECK(map->for_rank(0) == StreamSet::Out);
  CHECK(map->for_rank(1) == StreamSet::Err);
  CHECK(map->for_rank(2) == StreamSet::None);
  CHECK(includes_stdout(StreamSet::All));
  CHECK_FALSE(includes_stderr(StreamSet::Out));
  for (const char* bad : {"", "5", "-1", "x", "0:", ":1", "0:4", "0:1,", "0:1:2", "0:1,0:1"}) {
    CHECK_MESSAGE(!parse_stream_spec("--tee", bad).ok(), bad);
  }
}

TEST_CASE("--local_ranks_filter values") {
  auto none = parse_ranks_filter("");
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  auto some = parse_ranks_filter("0,3");
  REQUIRE(some.ok());
  CHECK(**some == std::set<int>{0, 3});
  for (const char* bad : {"a", "0,,1", "-1", "1;2"})
    CHECK_MESSAGE(!parse_ranks_filter(bad).ok(), bad);
}

TEST_CASE("rdzv conf and endpoints") {
  auto kv = parse_key_values("--rdzv_conf", "timeout=900, join_timeout=600");
  REQUIRE(kv.ok());
  CHECK(kv->at("timeout") == "900");
  CHECK(kv->at("join_timeout") == "600");
  auto hp = parse_host_port("--rdzv_endpoint", "[::1]:29400");
  REQUIRE(hp.ok());
  CHECK(hp->host == "::1");
  CHECK(hp->port == 29400);
  auto host_only = parse_host_port("--rdzv_endpoint", "node7");
  REQUIRE(host_only.ok());
  CHECK(host_only->port == 0);
}

TEST_CASE("durations: a year at most, whether from a flag or the environment") {
  CHECK(parse_seconds("--x", "0.5").value() == 0.5);
  CHECK(parse_seconds("--x", "31536000").value() == kMaxSeconds);
  for (const char* text : {"31536001", "1e30", "inf", "nan", "-1", "", "5s"}) {
    auto parsed = parse_seconds("DDPRUN_STRAGGLER_WINDOW", text);
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().exit_code == 2);
    CHECK(parsed.error().message.find("DDPRUN_STRAGGLER_WINDOW") == 0);
  }
}
