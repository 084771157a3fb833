#include <doctest/doctest.h>

#include <algorithm>
#include <thread>

#include "tests/rendezvous/frames.hpp"
#include "tests/rendezvous/test_server.hpp"

using namespace ddp::rdzv;
using namespace ddp::rdzv::test;

namespace {
bool any_line_contains(const std::vector<std::string>& lines, std::string_view what) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(what) != std::string::npos; });
}
}  // namespace

TEST_CASE("server: a malformed frame closes only that connection, with one log line") {
  TestServer server;
  StoreClient good(server.client_options());
  good.set("k", "v");
  BlockingSocket bad = server.raw();
  bad.send_all(std::string("\x0d", 1), soon());  // not a G1 opcode
  char byte;
  CHECK_THROWS_AS(bad.recv_exact(&byte, 1, soon()), StoreError);  // closed, no reply
  CHECK(good.get("k") == "v");
  auto stats =
      server.stats_when([](const StoreServerStats& s) { return s.closed_for_errors == 1; });
  CHECK(stats.closed_for_errors == 1);
  const auto log = server.log();
  CHECK(log.size() == 1);
  CHECK(any_line_contains(log, "unknown G1 opcode 0x0d"));
}

TEST_CASE("server: an oversize key is refused before it is received") {
  StoreLimits limits;
  limits.max_key_bytes = 1024;
  TestServer server(limits);
  BlockingSocket s = server.raw();
  g2_handshake(s);
  std::string frame(1, '\x01');  // G2 SET
  put_u64(frame, 1ull << 40);    // a terabyte key: must be rejected from the header alone
  s.send_all(frame, soon());
  char byte;
  CHECK_THROWS_AS(s.recv_exact(&byte, 1, soon()), StoreError);
  CHECK(any_line_contains(server.log(), "key length 1099511627776 exceeds limit 1024"));
  StoreClient good(server.client_options());
  CHECK(good.num_keys() == 0);
}

TEST_CASE("server: WAIT then SET from another client wakes the waiter") {
  TestServer server;
  StoreClient waiter(server.client_options());
  StoreClient setter(server.client_options());
  std::thread t([&] {
    server.stats_when([](const StoreServerStats& s) { return s.pending_waits == 1; });
    setter.set("late", "here");
  });
  CHECK(waiter.get("late") == "here");
  t.join();
  CHECK(server.stats().pending_waits == 0);
}

TEST_CASE("server: WAIT timeout cancels cleanly and the connection stays usable") {
  TestServer server;
  StoreClient c(server.client_options());
  CHECK_THROWS_AS(c.wait({"never"}, std::chrono::milliseconds(100)), StoreTimeoutError);
  CHECK(server.stats().pending_waits == 0);
  c.set("after", "1");
  CHECK(c.get("after") == "1");
}

TEST_CASE("server: a client that disconnects mid-WAIT leaves nothing behind") {
  TestServer server;
  {
    BlockingSocket s = server.raw();
    g2_handshake(s);
    s.send_all(encode_request(Generation::G2, make(Op::Wait, {"/a", "/b"})), soon());
    server.stats_when([](const StoreServerStats& st) { return st.pending_waits == 1; });
  }
  auto stats = server.stats_when([](const StoreServerStats& s) { return s.connections == 0; });
  CHECK(stats.connections == 0);
  CHECK(stats.pending_waits == 0);
  StoreClient c(server.client_options());
  c.set("a", "1");  // nobody to wake, nothing to write to
  c.set("b", "1");
  CHECK(c.num_keys() == 2);
}

TEST_CASE("server: a stalled client does not block others") {
  TestServer server;
  StoreClient writer(server.client_options());
  writer.set("big", std::string(4 << 20, 'x'));
  // Ask for a 4 MiB value many times and never read the replies.
  BlockingSocket stalled = server.raw();
  g2_handshake(stalled);
  std::string gets;
  for (int i = 0; i < 16; ++i) gets += encode_request(Generation::G2, make(Op::Get, {"/big"}));
  stalled.send_all(gets, soon());
  // A half-sent request must not block anyone either.
  BlockingSocket half = server.raw();
  half.send_all(std::string("\x00\x05\x00", 3), soon());
  StoreClient other(server.client_options());
  for (int i = 0; i < 100; ++i) CHECK(other.add("n", 1) == i + 1);
  CHECK(server.stats().connections == 4);
}

TEST_CASE("server: 200 concurrent clients agree on a counter") {
  TestServer server;
  constexpr int kClients = 200;
  std::vector<std::thread> threads;
  threads.reserve(kClients);
  std::vector<std::int64_t> seen(kClients, 0);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      StoreClient c(server.client_options());
      c.add("arrived", 1);
      c.wait({"go"});
      seen[i] = c.add("after", 1);
    });
  }
  StoreClient coordinator(server.client_options());
  for (int i = 0; i < 2000 && coordinator.add("arrived", 0) < kClients; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(coordinator.add("arrived", 0) == kClients);
  coordinator.set("go", "1");
  for (auto& t : threads) t.join();
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i < kClients; ++i) CHECK(seen[i] == i + 1);
}

TEST_CASE("server: G1 and G2 connections share one key space") {
  TestServer server;
  BlockingSocket g1 = server.raw();
  g1.send_all(encode_request(Generation::G1, make(Op::Set, {"/shared"}, {"from-g1"})), soon());
  StoreClient g2(server.client_options());
  CHECK(g2.get("shared") == "from-g1");
  g2.set("back", "from-g2");
  g1.send_all(encode_request(Generation::G1, make(Op::Wait, {"/back"})), soon());
  CHECK(g1.recv_u8(soon()) == kStopWaiting);
  g1.send_all(encode_request(Generation::G1, make(Op::Get, {"/back"})), soon());
  CHECK(g1.recv_bytes(soon(), 100) == "from-g2");
}

TEST_CASE(
    "server: G1 watch callbacks carry old and new values; registrations end with the connection") {
  TestServer server;
  {
    BlockingSocket cb = server.raw();
    cb.send_all(encode_request(Generation::G1, make(Op::WatchKey, {"/wk"})), soon());
    CHECK(cb.recv_u8(soon()) == 3);
    StoreClient c(server.client_options());
    c.set("wk", "abc");
    CHECK(cb.recv_u8(soon()) == static_cast<std::uint8_t>(WatchEventType::KeyCreated));
    CHECK(cb.recv_bytes(soon(), 100) == "/wk");
    CHECK(cb.recv_bytes(soon(), 100) == "");
    CHECK(cb.recv_bytes(soon(), 100) == "abc");
    c.delete_key("wk");
    CHECK(cb.recv_u8(soon()) == static_cast<std::uint8_t>(WatchEventType::KeyDeleted));
    CHECK(cb.recv_bytes(soon(), 100) == "/wk");
    CHECK(cb.recv_bytes(soon(), 100) == "abc");
    CHECK(cb.recv_bytes(soon(), 100) == "");
  }
  auto stats = server.stats_when([](const StoreServerStats& s) { return s.connections == 0; });
  CHECK(stats.watch_registrations == 0);
  StoreClient c(server.client_options());
  c.set("wk", "after");  // the watcher is gone: no write to a dead connection
  CHECK(c.get("wk") == "after");
}

TEST_CASE("server: a tagged G2 connection gets every reply and notification tagged") {
  TestServer server;
  BlockingSocket t = server.raw();
  g2_handshake(t);
  // TAGGED, WATCH_KEY and a PROBE pipelined in one segment: the reply to TAGGED is the first
  // tagged message.
  t.send_all(encode_request(Generation::G2, make(Op::Tagged, {}, {}, 0, kTaggedVersion)) +
                 encode_request(Generation::G2, make(Op::WatchKey, {"/tw"})) +
                 encode_request(Generation::G2, make(Op::Probe, {"/tw"})),
             soon());
  CHECK(t.recv_u8(soon()) == kTagReply);
  CHECK(t.recv_u8(soon()) == kTaggedOn);
  CHECK(t.recv_u8(soon()) == kTagReply);
  CHECK(t.recv_u8(soon()) == 3);
  CHECK(t.recv_u8(soon()) == kTagReply);
  CHECK(t.recv_u8(soon()) == kProbeReplyTag);
  CHECK(t.recv_u8(soon()) == 0);
  // A WAIT answered later: its STOP_WAITING is tagged too; the notification carries the key only.
  t.send_all(encode_request(Generation::G2, make(Op::Wait, {"/tw"})), soon());
  server.stats_when([](const StoreServerStats& s) { return s.pending_waits == 1; });
  StoreClient c(server.client_options());
  c.set("tw", std::string(1000, 'v'));
  std::vector<std::uint8_t> tags;
  for (int i = 0; i < 2; ++i) {
    const std::uint8_t tag = t.recv_u8(soon());
    tags.push_back(tag);
    if (tag == kTagReply) {
      CHECK(t.recv_u8(soon()) == kStopWaiting);
    } else {
      REQUIRE(tag == kTagEvent);
      CHECK(t.recv_u8(soon()) == static_cast<std::uint8_t>(WatchEventType::KeyCreated));
      CHECK(t.recv_bytes(soon(), 100) == "/tw");
    }
  }
  std::sort(tags.begin(), tags.end());
  CHECK(tags == std::vector<std::uint8_t>{kTagReply, kTagEvent});
  // UNWATCH: no more notifications; a GET's reply is tagged as usual.
  t.send_all(encode_request(Generation::G2, make(Op::Unwatch, {"/tw"})), soon());
  CHECK(t.recv_u8(soon()) == kTagReply);
  CHECK(t.recv_u8(soon()) == 1);
  c.set("tw", "again");
  CHECK(c.get("tw") == "again");  // applied before the GET below (SET has no reply)
  t.send_all(encode_request(Generation::G2, make(Op::Get, {"/tw"})), soon());
  CHECK(t.recv_u8(soon()) == kTagReply);
  CHECK(t.recv_bytes(soon(), 100) == "again");
}

TEST_CASE("server: TAGGED twice, or WATCH_KEY on a plain G2 connection, closes it with one line") {
  TestServer server;
  BlockingSocket twice = server.raw();
  g2_handshake(twice);
  const std::string tagged =
      encode_request(Generation::G2, make(Op::Tagged, {}, {}, 0, kTaggedVersion));
  twice.send_all(tagged + tagged, soon());
  CHECK(twice.recv_u8(soon()) == kTagReply);
  CHECK(twice.recv_u8(soon()) == kTaggedOn);
  char byte;
  CHECK_THROWS_AS(twice.recv_exact(&byte, 1, soon()), StoreError);
  BlockingSocket plain = server.raw();
  g2_handshake(plain);
  plain.send_all(encode_request(Generation::G2, make(Op::WatchKey, {"/x"})), soon());
  CHECK_THROWS_AS(plain.recv_exact(&byte, 1, soon()), StoreError);
  auto stats =
      server.stats_when([](const StoreServerStats& s) { return s.closed_for_errors == 2; });
  CHECK(stats.closed_for_errors == 2);
  CHECK(stats.watch_registrations == 0);
  CHECK(any_line_contains(server.log(), "TAGGED on a connection already tagged"));
  CHECK(any_line_contains(server.log(), "not in tagged mode"));
  StoreClient good(server.client_options());
  good.set("k", "v");
  CHECK(good.get("k") == "v");
}

TEST_CASE("server: the connection limit refuses extra clients and logs it") {
  StoreLimits limits;
  limits.max_connections = 2;
  TestServer server(limits);
  StoreClient a(server.client_options());
  StoreClient b(server.client_options());
  BlockingSocket extra = server.raw();
  char byte;
  CHECK_THROWS_AS(extra.recv_exact(&byte, 1, soon()), StoreError);
  CHECK(any_line_contains(server.log(), "connection limit 2 reached"));
  CHECK(a.add("x", 1) == 1);
}

TEST_CASE("server: a port in use is a clear StoreBindError") {
  TestServer first;
  boost::asio::io_context io;
  StoreServerOptions opts;
  opts.port = first.port();
  try {
    StoreServer second(io, opts);
    FAIL("second server bound a port in use");
  } catch (const StoreBindError& e) {
    const std::string what = e.what();
    CHECK(what.find("127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
    CHECK(what.find("address already in use") != std::string::npos);
  }
}

TEST_CASE("server: port 0 binds a real port that is held") {
  boost::asio::io_context io;
  StoreServer server(io, StoreServerOptions{});
  CHECK(server.port() != 0);
  StoreServerOptions same;
  same.port = server.port();
  CHECK_THROWS_AS(StoreServer(io, same), StoreBindError);
}

TEST_CASE("server: a SET followed by an immediate close is applied") {
  TestServer server;
  {
    BlockingSocket s = server.raw();
    g2_handshake(s);
    s.send_all(encode_request(Generation::G2, make(Op::Set, {"/quick"}, {"v"})), soon());
  }
  StoreClient c(server.client_options());
  CHECK(c.get("quick") == "v");
}

TEST_CASE("server: a host name is resolved (localhost) and clients reach it") {
  boost::asio::io_context io;
  StoreServerOptions opts;
  opts.bind_address = "localhost";
  StoreServer server(io, opts);
  server.start();
  std::thread t([&] { io.run(); });
  StoreClientOptions o;
  o.host = "localhost";
  o.port = server.port();
  o.connect_timeout = std::chrono::seconds(10);
  {
    StoreClient c(o);
    c.set("k", "v");
    CHECK(c.get("k") == "v");
  }
  boost::asio::post(io, [&] {
    server.stop();
    io.stop();
  });
  t.join();
}

TEST_CASE("server: many half-sent large values hit the server-wide input budget, not the memory") {
  // Past the budget, the connection holding the most unfinished input is closed: here `a`, which
  // stalls with 700 KiB, when `b` takes the total past 1 MiB; `b` is then served normally.
  StoreLimits limits;
  limits.max_total_input_bytes = 1 << 20;
  TestServer server(limits);
  auto half_set = [](const std::string& key, std::size_t announced, std::size_t sent) {
    std::string frame(1, '\x00');  // G1 SET
    put_bytes(frame, key);
    put_u64(frame, announced);
    frame.append(sent, 'x');
    return frame;
  };
  BlockingSocket a = server.raw();
  a.send_all(half_set("/a", 900 << 10, 700 << 10), soon());
  server.stats_when(
      [](const StoreServerStats& s) { return s.buffered_input_bytes >= (700u << 10); });
  BlockingSocket b = server.raw();
  b.send_all(half_set("/b", 900 << 10, 500 << 10), soon());
  char byte;
  CHECK_THROWS_AS(a.recv_exact(&byte, 1, soon()), StoreError);  // a is closed
  CHECK(any_line_contains(server.log(),
                          "bytes of unfinished requests while all connections together hold more "
                          "than the limit of 1048576 bytes"));
  b.send_all(std::string(400 << 10, 'x'), soon());  // b finishes its value: served normally
  StoreClient c(server.client_options());
  CHECK(c.get("b").size() == (900u << 10));
  auto stats =
      server.stats_when([](const StoreServerStats& s) { return s.buffered_input_bytes == 0; });
  CHECK(stats.buffered_input_bytes == 0);
  CHECK(stats.closed_for_errors == 1);
}

namespace {
std::string recv_bytes(BlockingSocket& s) {
  const auto n = s.recv_i64(soon());
  std::string value(static_cast<std::size_t>(n), '\0');
  if (n > 0) s.recv_exact(value.data(), value.size(), soon());
  return value;
}
}  // namespace

TEST_CASE("server: pipelined requests in one write get every reply, in order") {
  TestServer server;
  BlockingSocket s = server.raw();
  g2_handshake(s);
  std::string batch;
  for (const Command& c :
       {make(Op::Set, {"/p"}, {"v1"}), make(Op::Get, {"/p"}), make(Op::Add, {"/c"}, {}, 2),
        make(Op::Add, {"/c"}, {}, 3), make(Op::Check, {"/p"}), make(Op::Get, {"/p"})}) {
    batch += encode_request(Generation::G2, c);
  }
  s.send_all(batch, soon());
  CHECK(recv_bytes(s) == "v1");
  CHECK(s.recv_i64(soon()) == 2);
  CHECK(s.recv_i64(soon()) == 5);
  char ready = 1;
  s.recv_exact(&ready, 1, soon());
  CHECK(ready == 0);  // CheckResponse READY
  CHECK(recv_bytes(s) == "v1");
}

TEST_CASE(
    "server: good replies before a bad frame in the same read still arrive, then the connection "
    "closes") {
  TestServer server;
  BlockingSocket s = server.raw();
  g2_handshake(s);
  s.send_all(encode_request(Generation::G2, make(Op::Set, {"/p"}, {"v1"})) +
                 encode_request(Generation::G2, make(Op::Get, {"/p"})) + std::string("\xff", 1),
             soon());
  CHECK(recv_bytes(s) == "v1");
  char byte;
  CHECK_THROWS_AS(s.recv_exact(&byte, 1, soon()), StoreError);
  CHECK(server.stats_when([](const StoreServerStats& st) { return st.closed_for_errors == 1; })
            .closed_for_errors == 1);
}

TEST_CASE("server: a pipelined burst whose replies pass the output bound is answered in full") {
  // The burst's requests stop being handled at the bound; once the socket took those replies, the
  // rest (already read, no more bytes coming) must be handled too.
  StoreLimits limits;
  limits.max_pending_output_bytes = 4096;
  TestServer server(limits);
  BlockingSocket client = server.raw();
  g2_handshake(client);
  const std::string value(1000, 'v');
  std::string burst = encode_request(Generation::G2, make(Op::Set, {"/big"}, {value}));
  constexpr int kGets = 50;
  for (int i = 0; i < kGets; ++i) burst += encode_request(Generation::G2, make(Op::Get, {"/big"}));
  client.send_all(burst + encode_request(Generation::G2, make(Op::Ping, {}, {}, 0, 8)), soon());
  for (int i = 0; i < kGets; ++i) {
    INFO("reply " << i);
    REQUIRE(client.recv_bytes(soon(), 4096) == value);
  }
  CHECK(client.recv_u32(soon()) == 8);
}
