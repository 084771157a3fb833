// LibTorch's own C++ c10d::TCPStore client (Debian libtorch 1.13, protocol G1) against our
// StoreServer: every command, including watchKey callbacks and check. The only file of the
// rendezvous tests that includes Torch headers (they compile slowly).

#include <condition_variable>
#include <future>
#include <mutex>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// glog (pulled in by Torch) defines CHECK; doctest's must win in this file.
#undef CHECK
#include <doctest/doctest.h>

#include "tests/rendezvous/test_server.hpp"

using namespace ddp::rdzv;
using namespace ddp::rdzv::test;

namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

c10::intrusive_ptr<c10d::TCPStore> torch_client(std::uint16_t port, std::size_t world_size = 1) {
  c10d::TCPStoreOptions opts;
  opts.port = port;
  opts.isServer = false;
  opts.numWorkers = world_size;
  opts.waitWorkers = true;  // sends ADD init/ like every real worker
  opts.timeout = std::chrono::seconds(30);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
}

// Collects watch callbacks, which LibTorch runs on its own listener thread.
struct WatchLog {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<std::string, std::string>> events;  // (old or "<none>", new or "<none>")

  c10d::WatchKeyCallback callback() {
    return [this](c10::optional<std::string> old_value, c10::optional<std::string> new_value) {
      std::lock_guard lock(m);
      events.emplace_back(old_value.value_or("<none>"), new_value.value_or("<none>"));
      cv.notify_all();
    };
  }

  bool wait_for(std::size_t n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return events.size() >= n; });
  }
};

}  // namespace

TEST_CASE("libtorch 1.13 c10d::TCPStore: every command") {
  TestServer server;
  auto store = torch_client(server.port());
  store->set("k", bytes("v"));
  CHECK(text(store->get("k")) == "v");
  CHECK(store->add("n", 5) == 5);
  CHECK(store->add("n", -7) == -2);
  CHECK(text(store->get("n")) == "-2");
  CHECK(text(store->compareSet("k", bytes("v"), bytes("w"))) == "w");
  CHECK(text(store->compareSet("k", bytes("v"), bytes("x"))) == "w");
  CHECK(text(store->compareSet("absent", bytes("exp"), bytes("x"))) == "exp");
  CHECK(store->check({"k", "n"}));
  CHECK_FALSE(store->check({"k", "absent"}));
  store->wait({"k"});
  CHECK_THROWS(store->wait({"never"}, std::chrono::milliseconds(200)));
  CHECK(store->getNumKeys() == 3);  // init/, k, n
  CHECK(store->deleteKey("k"));
  CHECK_FALSE(store->deleteKey("k"));
  CHECK(store->getNumKeys() == 2);
  CHECK(server.log().empty());
}

TEST_CASE("libtorch 1.13 c10d::TCPStore: watchKey callbacks from G1 and G2 writers") {
  TestServer server;
  {
    auto store = torch_client(server.port());
    WatchLog log;
    store->watchKey("wk", log.callback());
    store->set("wk", bytes("abc"));
    REQUIRE(log.wait_for(1));
    store->set("wk", bytes("def"));
    REQUIRE(log.wait_for(2));
    StoreClient g2(server.client_options());  // a torch 2.x-dialect writer on the same key
    g2.append("wk", "!");
    REQUIRE(log.wait_for(3));
    store->deleteKey("wk");
    REQUIRE(log.wait_for(4));
    std::lock_guard lock(log.m);
    CHECK(log.events[0] == std::pair<std::string, std::string>{"<none>", "abc"});
    CHECK(log.events[1] == std::pair<std::string, std::string>{"abc", "def"});
    CHECK(log.events[2] == std::pair<std::string, std::string>{"def", "def!"});
    CHECK(log.events[3] == std::pair<std::string, std::string>{"def!", "<none>"});
  }
  // Both connections of the torch client are gone: no registration survives them.
  auto stats = server.stats_when([](const StoreServerStats& s) { return s.connections == 0; });
  CHECK(stats.watch_registrations == 0);
  StoreClient after(server.client_options());
  after.set("wk", "later");
  CHECK(after.get("wk") == "later");
}

TEST_CASE("libtorch 1.13 c10d::TCPStore: two workers meet through init/") {
  TestServer server;
  auto a = std::async(std::launch::async, [&] { return torch_client(server.port(), 2); });
  auto b = std::async(std::launch::async, [&] { return torch_client(server.port(), 2); });
  auto sa = a.get();
  auto sb = b.get();
  sa->set("from_a", bytes("1"));
  CHECK(text(sb->get("from_a")) == "1");
  StoreClient g2(server.client_options());
  g2.set("k", "v");
  CHECK(g2.add("init", 0) == 0);  // "/init" is not the raw "init/" key
}
