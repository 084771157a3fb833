// SPDX-License-Identifier: MIT
// HeartbeatSocket and FileTimerServer on a real loop with real datagrams, a real FIFO written the
// way PyTorch's FileTimerClient writes it, and real processes whose timers expire.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "launcher/health/file_timer_server.hpp"
#include "launcher/health/heartbeat_socket.hpp"
#include "loop_helpers.hpp"

using namespace ddp::launcher::health;
using ddp::testing::run_until;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/ddprun-health-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

void send_datagram(const std::string& path, const std::string& text) {
  int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  REQUIRE(::sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&addr),
                   sizeof(addr)) == static_cast<ssize_t>(text.size()));
  ::close(fd);
}

// FileTimerClient: open O_WRONLY|O_NONBLOCK, write one JSON line, close.
bool client_write(const std::string& fifo, const std::string& line) {
  int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd < 0) return false;
  std::string text = line + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

pid_t start_sleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("sleep", "sleep", "60", nullptr);
    ::_exit(127);
  }
  return pid;
}

}  // namespace

TEST_CASE("step datagrams: numbers parsed; anything else is progress without a step") {
  CHECK(parse_heartbeat_step("step 12") == 12);
  CHECK(parse_heartbeat_step("step 12\n") == 12);
  CHECK(parse_heartbeat_step("step  7") == 7);
  CHECK_FALSE(parse_heartbeat_step("step -1"));
  CHECK_FALSE(parse_heartbeat_step("step x"));
  CHECK_FALSE(parse_heartbeat_step("alive"));
  CHECK_FALSE(parse_heartbeat_step(""));
}

TEST_CASE("the heartbeat socket receives every datagram and the last step") {
  boost::asio::io_context io;
  size_t received = 0;
  std::optional<long long> last;
  HeartbeatSocket socket(io, [&](size_t n, std::optional<long long> step) {
    received += n;
    if (step) last = step;
  });
  const std::string dir = temp_dir();
  REQUIRE(socket.open(dir + "/hb.sock"));
  // The kernel queues few datagrams per socket (net.unix.max_dgram_qlen): a blocked sender waits
  // for the loop to read, so the sender is a thread.
  std::thread sender([&] {
    for (int i = 1; i <= 500; ++i)
      send_datagram(dir + "/hb.sock", i % 2 ? fmt::format("step {}", i) : "tick");
  });
  CHECK(run_until(io, [&] { return received == 500; }));
  sender.join();
  CHECK(last == 499);
  socket.close();
  CHECK_FALSE(std::filesystem::exists(dir + "/hb.sock"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a heartbeat socket path that does not fit sun_path is refused with one line") {
  boost::asio::io_context io;
  HeartbeatSocket socket(io, [](size_t, std::optional<long long>) {});
  auto opened = socket.open("/tmp/" + std::string(200, 'x'));
  REQUIRE_FALSE(opened);
  CHECK(opened.error().message.find("too long") != std::string::npos);
}

TEST_CASE(
    "file timer: a client can write at once; an acquire past its deadline fires for that pid") {
  boost::asio::io_context io;
  std::vector<TimerRequest> requests;
  std::vector<ExpiredTimer> expired;
  FileTimerServer server(io, {[&](const TimerRequest& r) { requests.push_back(r); },
                              [&](const std::vector<ExpiredTimer>& e) {
                                expired.insert(expired.end(), e.begin(), e.end());
                              },
                              nullptr});
  const std::string dir = temp_dir();
  REQUIRE(server.open(dir + "/timer"));
  pid_t victim = start_sleeper();
  pid_t released = start_sleeper();
  const double now = epoch_seconds();
  REQUIRE(client_write(
      dir + "/timer",
      fmt::format(
          R"({{"version": 1, "pid": {}, "scope_id": "f.py#3", "expiration_time": {}, "signal": 9}})",
          victim, now + 0.3)));
  REQUIRE(client_write(
      dir + "/timer",
      fmt::format(
          R"({{"version": 1, "pid": {}, "scope_id": "g.py#4", "expiration_time": {}, "signal": 9}})",
          released, now + 0.3)));
  REQUIRE(client_write(
      dir + "/timer",
      fmt::format(
          R"({{"version": 1, "pid": {}, "scope_id": "g.py#4", "expiration_time": -1, "signal": 0}})",
          released)));
  CHECK(run_until(io, [&] { return !expired.empty(); }));
  CHECK(requests.size() == 3);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == victim);
  CHECK(expired[0].scope == "f.py#3");
  CHECK(expired[0].signal == 9);
  CHECK(epoch_seconds() >= expired[0].deadline);
  CHECK(server.timers() == 0);
  for (pid_t p : {victim, released}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  server.close();
  CHECK_FALSE(std::filesystem::exists(dir + "/timer"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("file timer: a pid that is gone never fires; bad lines are reported and skipped") {
  boost::asio::io_context io;
  std::vector<ExpiredTimer> expired;
  std::vector<std::string> bad;
  FileTimerServer server(io, {nullptr,
                              [&](const std::vector<ExpiredTimer>& e) {
                                expired.insert(expired.end(), e.begin(), e.end());
                              },
                              [&](size_t, const std::string& why) { bad.push_back(why); }});
  const std::string dir = temp_dir();
  REQUIRE(server.open(dir + "/timer"));
  pid_t gone = start_sleeper();
  ::kill(gone, SIGKILL);
  ::waitpid(gone, nullptr, 0);
  pid_t alive = start_sleeper();
  const double now = epoch_seconds();
  REQUIRE(client_write(dir + "/timer", "garbage"));
  REQUIRE(client_write(
      dir + "/timer",
      fmt::format(
          R"({{"version": 1, "pid": {}, "scope_id": "s", "expiration_time": {}, "signal": 9}})",
          gone, now + 0.2)));
  REQUIRE(client_write(
      dir + "/timer",
      fmt::format(
          R"({{"version": 1, "pid": {}, "scope_id": "s", "expiration_time": {}, "signal": 9}})",
          alive, now + 0.4)));
  CHECK(run_until(io, [&] { return !expired.empty(); }));
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == alive);
  CHECK(bad == std::vector<std::string>{"not a JSON object"});
  ::kill(alive, SIGKILL);
  ::waitpid(alive, nullptr, 0);
  std::filesystem::remove_all(dir);
}
