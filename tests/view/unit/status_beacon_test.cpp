// SPDX-License-Identifier: MIT
// How `ddprun top` picks a job without being told: the same directory first, else the newest.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "launcher/health/status_beacon.hpp"

using namespace ddp::launcher::health;

TEST_CASE("choose_beacon: the newest started here, else the newest of the user's") {
  std::vector<BeaconEntry> live = {{1, "/a", "127.0.0.1", 100, "h", 10.0},
                                   {2, "/b", "127.0.0.1", 200, "h", 30.0},
                                   {3, "/a", "127.0.0.1", 300, "h", 20.0}};
  CHECK(choose_beacon(live, "/a")->port == 300);
  CHECK(choose_beacon(live, "/c")->port == 200);
  CHECK_FALSE(choose_beacon({}, "/a"));
  // Every ddprun has a beacon now (its local socket): in the same directory, the one started
  // with --status-port wins over a newer socket-only one (two nodes of a job on one machine).
  std::vector<BeaconEntry> nodes = {{4, "/a", "127.0.0.1", 0, "h", 50.0, 0, "/r1/status.sock"},
                                    {5, "/a", "127.0.0.1", 400, "h", 40.0, 0, "/r2/status.sock"},
                                    {6, "/b", "127.0.0.1", 500, "h", 60.0}};
  CHECK(choose_beacon(nodes, "/a")->pid == 5);
  CHECK(choose_beacon(nodes, "/c")->pid == 6);
  nodes.pop_back();
  CHECK(choose_beacon(nodes, "/c")->pid == 5);
}

TEST_CASE("parse_beacon refuses junk") {
  CHECK_FALSE(parse_beacon("x"));
  CHECK_FALSE(parse_beacon(R"ev({"pid":1,"cwd":"/","address":"a","port":0})ev"));
  CHECK(parse_beacon(R"ev({"pid":1,"cwd":"/","address":"a","port":9})ev")->port == 9);
  // Without --status-port: the Unix socket alone names the endpoint.
  auto socket_only =
      parse_beacon(R"ev({"pid":1,"cwd":"/","address":"a","port":0,"socket":"/r/status.sock"})ev");
  REQUIRE(socket_only);
  CHECK(socket_only->port == 0);
  CHECK(socket_only->socket == "/r/status.sock");
  CHECK_FALSE(parse_beacon(R"ev({"pid":1,"cwd":"/","address":"a","port":-1,"socket":"/s"})ev"));
}

TEST_CASE("a written beacon is found while its writer lives, and removed with it") {
  auto dir = std::filesystem::temp_directory_path() / ("beacon-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  {
    auto beacon = StatusBeacon::write(dir.string(), "127.0.0.1", 4242, "h");
    REQUIRE(beacon);
    auto found = find_status_beacon(dir.string(), "/nowhere");
    REQUIRE(found);
    CHECK(found->port == 4242);
    CHECK(found->pid == ::getpid());
  }
  CHECK_FALSE(find_status_beacon(dir.string(), "/nowhere"));
  // A dead writer's beacon is ignored (pid 2^22+ is above pid_max's default).
  {
    std::FILE* f = std::fopen((dir / "status-99999999.json").c_str(), "w");
    std::fputs(R"ev({"pid":99999999,"cwd":"/","address":"127.0.0.1","port":5})ev", f);
    std::fclose(f);
  }
  CHECK_FALSE(find_status_beacon(dir.string(), "/"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a FIFO or a huge file named like a beacon is skipped, never read whole or waited on") {
  auto dir =
      std::filesystem::temp_directory_path() / ("beacon-hostile-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  REQUIRE(::mkfifo((dir / "status-1.json").c_str(), 0600) == 0);  // no writer: a read would block
  {
    std::FILE* f = std::fopen((dir / "status-2.json").c_str(), "w");
    std::string big(1 << 20, ' ');  // 1 MiB of padding before a valid beacon
    big += R"ev({"pid":1,"cwd":"/","address":"127.0.0.1","port":7})ev";
    std::fputs(big.c_str(), f);
    std::fclose(f);
  }
  auto beacon = StatusBeacon::write(dir.string(), "127.0.0.1", 4343, "h");
  REQUIRE(beacon);
  auto found = find_status_beacon(dir.string(), "/nowhere");
  REQUIRE(found);
  CHECK(found->port == 4343);
  beacon.reset();
  std::filesystem::remove_all(dir);
}

TEST_CASE("proc_start_time reads /proc/PID/stat's 22nd field, whatever the command name holds") {
  const std::string stat =
      "4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
  CHECK(proc_start_time(stat) == 987654ULL);
  CHECK_FALSE(proc_start_time("4242 (x) S 1"));
  CHECK_FALSE(proc_start_time("garbage"));
  REQUIRE(process_start_time(::getpid()));
  CHECK(*process_start_time(::getpid()) > 0);
}

TEST_CASE("a beacon whose pid now belongs to another process (a reused pid) is dropped") {
  auto dir =
      std::filesystem::temp_directory_path() / ("beacon-reused-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  const auto me = *process_start_time(::getpid());
  auto put = [&](const char* name, unsigned long long start, int port) {
    std::FILE* f = std::fopen((dir / name).c_str(), "w");
    std::fputs(
        fmt::format(
            R"ev({{"pid":{},"cwd":"/here","address":"127.0.0.1","port":{},"started":{},"proc_start":{}}})ev",
            ::getpid(), port, port, start)
            .c_str(),
        f);
    std::fclose(f);
  };
  // The stale one is newer and from the same directory: only its start time tells it apart.
  put("status-1.json", me, 100);
  put("status-2.json", me + 1, 200);
  auto found = find_status_beacon(dir.string(), "/here");
  REQUIRE(found);
  CHECK(found->port == 100);
  CHECK_FALSE(std::filesystem::exists(dir / "status-2.json"));  // the stale beacon is removed
  std::filesystem::remove_all(dir);
}
