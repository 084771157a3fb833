#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "tests/rendezvous/test_server.hpp"

using namespace ddp::rdzv;
using namespace ddp::rdzv::test;

TEST_CASE("client: every G2 command round-trips") {
  TestServer server;
  StoreClient c(server.client_options());
  c.set("k", "v");
  CHECK(c.get("k") == "v");
  CHECK(c.add("n", 5) == 5);
  CHECK(c.compare_set("k", "v", "w") == "w");
  CHECK(c.compare_set("k", "v", "x") == "w");
  CHECK(c.check({"k", "n"}));
  CHECK_FALSE(c.check({"k", "missing"}));
  c.multi_set({"a", "b"}, {"1", std::string("\0\1", 2)});
  CHECK(c.multi_get({"a", "b"}) == std::vector<std::string>{"1", std::string("\0\1", 2)});
  c.append("a", "23");
  CHECK(c.get("a") == "123");
  CHECK(c.delete_key("a"));
  CHECK_FALSE(c.delete_key("a"));
  CHECK(c.num_keys() == 3);
  auto keys = c.list_keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"b", "k", "n"});
  c.queue_push("q", "1");
  c.queue_push("q", "2");
  CHECK(c.queue_len("q") == 2);
  CHECK(c.queue_pop("q") == "1");
  CHECK(c.queue_pop("q", true) == "2");
  CHECK_FALSE(c.queue_pop("q"));
  c.barrier("bar", 1);
}

TEST_CASE("client: blocking pop and barrier across clients") {
  TestServer server;
  StoreClient producer(server.client_options());
  StoreClient consumer(server.client_options());
  std::thread t([&] {
    server.stats_when([](const StoreServerStats& s) { return s.pending_waits == 1; });
    producer.queue_push("jobs", "job-1");
    producer.barrier("done", 2);
  });
  CHECK(consumer.queue_pop("jobs", true) == "job-1");
  consumer.barrier("done", 2);
  t.join();
}

TEST_CASE("client: connect timeout names the address") {
  std::uint16_t dead_port;
  {
    TestServer server;
    dead_port = server.port();
  }
  StoreClientOptions o;
  o.port = dead_port;
  o.connect_timeout = std::chrono::milliseconds(200);
  try {
    StoreClient c(o);
    FAIL("connected to a closed port");
  } catch (const StoreConnectError& e) {
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(dead_port)) !=
          std::string::npos);
    CHECK(std::string(e.what()).find("connection refused") != std::string::npos);
  }
}

TEST_CASE("client: reconnects after the server restarts on the same port") {
  auto server = std::make_unique<TestServer>();
  const std::uint16_t port = server->port();
  StoreClientOptions o = server->client_options();
  StoreClient c(o);
  c.set("before", "1");
  server.reset();
  // Restart on the same port (reuse_address lets us through TIME_WAIT).
  boost::asio::io_context io;
  StoreServerOptions opts;
  opts.port = port;
  StoreServer again(io, opts);
  again.start();
  std::thread t([&] { io.run(); });
  CHECK(c.num_keys() == 0);  // idempotent call: reconnect + retry transparently
  c.set("after", "2");
  CHECK(c.get("after") == "2");
  boost::asio::post(io, [&] {
    again.stop();
    io.stop();
  });
  t.join();
}

TEST_CASE("client: refuses a server that answers the handshake wrongly") {
  // A peer that reads VALIDATE+PING and echoes garbage.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  acceptor.non_blocking(true);
  const auto port = acceptor.local_endpoint().port();
  std::atomic<bool> done{false};
  std::thread peer([&] {
    while (!done) {
      boost::system::error_code ec;
      auto sock = acceptor.accept(ec);
      if (ec) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      sock.non_blocking(false);
      char buf[10];
      boost::asio::read(sock, boost::asio::buffer(buf), ec);
      boost::asio::write(sock, boost::asio::buffer("XXXX", 4), ec);
    }
  });
  StoreClientOptions o;
  o.port = port;
  o.connect_timeout = std::chrono::milliseconds(300);
  try {
    StoreClient c(o);
    FAIL("accepted a bad PING echo");
  } catch (const StoreConnectError& e) {
    CHECK(std::string(e.what()).find("PING") != std::string::npos);
  }
  done = true;
  peer.join();
}
