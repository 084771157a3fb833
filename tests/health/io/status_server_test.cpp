// SPDX-License-Identifier: MIT
// StatusServer with real TCP clients on 127.0.0.1 (and one on its Unix socket): answers, errors,
// and hostile clients (too large, too many, too slow) that must cost the loop nothing.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "launcher/health/status_server.hpp"
#include "loop_helpers.hpp"

using namespace ddp::launcher::health;
using ddp::testing::run_until;

namespace {

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// Sends `request` and reads until the server closes (a client thread; the loop runs meanwhile).
std::string exchange(boost::asio::io_context& io, int port, const std::string& request) {
  std::string reply;
  std::atomic<bool> done{false};
  std::thread client([&] {
    int fd = connect_to(port);
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<size_t>(n));
    ::close(fd);
    done = true;
  });
  run_until(io, [&] { return done.load(); });
  client.join();
  return reply;
}

HttpAnswer provider(const std::string& target) {
  if (target == "/healthz") return {200, "text/plain", "ok\n"};
  return {404, "text/plain", "not found\n"};
}

}  // namespace

TEST_CASE("GET answers; unknown paths 404; other methods 405; query strings ignored") {
  boost::asio::io_context io;
  StatusServer server(io, provider);
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  CHECK(*port > 0);
  auto ok = exchange(io, *port,
                     "GET /healthz?x=1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  CHECK(ok.starts_with("HTTP/1.1 200 OK"));
  CHECK(ok.find("\r\n\r\nok\n") != std::string::npos);
  CHECK(exchange(io, *port, "GET /nope HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .starts_with("HTTP/1.1 404"));
  CHECK(
      exchange(io, *port, "POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
          .starts_with("HTTP/1.1 405"));
  auto head =
      exchange(io, *port, "HEAD /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  CHECK(head.starts_with("HTTP/1.1 200"));
  CHECK(head.find("ok\n") == std::string::npos);
}

TEST_CASE("keep-alive: two requests on one connection") {
  boost::asio::io_context io;
  StatusServer server(io, provider, {16, 8192, std::chrono::milliseconds(300)});
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  auto reply = exchange(io, *port,
                        "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\nGET /healthz "
                        "HTTP/1.1\r\nHost: localhost\r\n\r\n");
  size_t first = reply.find("HTTP/1.1 200");
  REQUIRE(first != std::string::npos);
  CHECK(reply.find("HTTP/1.1 200", first + 1) != std::string::npos);
}

TEST_CASE("a request over the size limit gets 431 and the connection closed") {
  boost::asio::io_context io;
  StatusServer server(io, provider, {16, 1024, std::chrono::milliseconds(2000)});
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  std::string big =
      "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Junk: " + std::string(4000, 'j') + "\r\n\r\n";
  CHECK(exchange(io, *port, big).starts_with("HTTP/1.1 431"));
}

TEST_CASE("a client that never completes its request is cut off; others are served meanwhile") {
  boost::asio::io_context io;
  StatusServer server(io, provider, {16, 8192, std::chrono::milliseconds(300)});
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  int slow = connect_to(*port);
  ::send(slow, "GET /hea", 8, MSG_NOSIGNAL);
  CHECK(exchange(io, *port, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .starts_with("HTTP/1.1 200"));
  // The server closes the slow one: recv sees EOF (or a reset) once the loop has run.
  std::atomic<bool> closed{false};
  std::thread reader([&] {
    char buf[64];
    while (::recv(slow, buf, sizeof buf, 0) > 0) {
    }
    closed = true;
  });
  CHECK(run_until(io, [&] { return closed.load(); }));
  reader.join();
  ::close(slow);
  CHECK(run_until(io, [&] { return server.connections() == 0; }));
}

TEST_CASE("full: the connection idle the longest makes room, so a probe is answered") {
  boost::asio::io_context io;
  StatusServer server(io, provider, {2, 8192, std::chrono::milliseconds(5000)});
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  int a = connect_to(*port);
  CHECK(run_until(io, [&] { return server.connections() == 1; }));
  int b = connect_to(*port);
  CHECK(run_until(io, [&] { return server.connections() == 2; }));
  std::atomic<bool> a_closed{false};
  std::thread reader([&] {
    char buf[64];
    while (::recv(a, buf, sizeof buf, 0) > 0) {
    }
    a_closed = true;
  });
  // Before: a third connection was closed at accept and a liveness probe starved.
  CHECK(exchange(io, *port, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .find("200 OK") != std::string::npos);
  CHECK(run_until(io, [&] { return a_closed.load(); }));  // the oldest idle one went
  reader.join();
  CHECK(run_until(io, [&] { return server.connections() == 1; }));  // b stays; the limit holds
  for (int fd : {a, b}) ::close(fd);
}

TEST_CASE("a Host that is not this endpoint's is answered 421 (DNS rebinding)") {
  boost::asio::io_context io;
  StatusServer server(io, provider);
  server.allow_hosts({"metrics.example"}, "node-a.cluster.local");
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  auto get = [&](const std::string& host) {
    return exchange(io, *port,
                    "GET /healthz HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
  };
  CHECK(get("attacker.example:" + std::to_string(*port)).find("HTTP/1.1 421") == 0);
  CHECK(get("attacker.example").find("ok\n") == std::string::npos);
  CHECK(get("localhost:" + std::to_string(*port)).find("HTTP/1.1 200") == 0);
  CHECK(get("127.0.0.1:" + std::to_string(*port)).find("HTTP/1.1 200") == 0);
  CHECK(get("metrics.example").find("HTTP/1.1 200") == 0);
  CHECK(get("NODE-A").find("HTTP/1.1 200") == 0);
  CHECK(get("").find("HTTP/1.1 421") == 0);
  auto raw = [&](const std::string& request) { return exchange(io, *port, request); };
  // Two Host headers (a proxy and the server could read different ones): 400, whichever first.
  CHECK(raw("GET /healthz HTTP/1.1\r\nHost: localhost\r\nHost: evil.com\r\n\r\n")
            .find("HTTP/1.1 400") == 0);
  CHECK(raw("GET /healthz HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n")
            .find("HTTP/1.1 400") == 0);
  CHECK(raw("GET /healthz HTTP/1.1\r\n\r\n").find("HTTP/1.1 400") == 0);
  CHECK(raw("GET /healthz HTTP/1.0\r\n\r\n").find(" 200 ") != std::string::npos);
  // The absolute form names a host too.
  CHECK(raw("GET http://evil.com/healthz HTTP/1.1\r\nHost: localhost\r\nConnection: "
            "close\r\n\r\n")
            .find("HTTP/1.1 421") == 0);
  CHECK(raw("GET http://localhost/healthz HTTP/1.1\r\nHost: localhost\r\nConnection: "
            "close\r\n\r\n")
            .find("HTTP/1.1 200") == 0);
}

TEST_CASE("host_header_allowed: addresses, localhost, this host, the allowed names") {
  const std::vector<std::string> none;
  CHECK_FALSE(host_header_allowed("", "h", none));  // a Host header naming nothing
  CHECK(host_header_allowed("127.0.0.1:8080", "h", none));
  CHECK(host_header_allowed("[::1]:8080", "h", none));
  CHECK(host_header_allowed("10.1.2.3", "h", none));
  CHECK(host_header_allowed("LocalHost.:9", "h", none));
  CHECK(host_header_allowed("app.localhost", "h", none));
  CHECK(host_header_allowed("node-a:1", "node-a.cluster.local", none));
  CHECK(host_header_allowed("node-a.cluster.local", "node-a.cluster.local", none));
  CHECK_FALSE(host_header_allowed("attacker.example", "h", none));
  CHECK_FALSE(host_header_allowed("localhost.attacker.example", "h", none));
  CHECK_FALSE(host_header_allowed("127.0.0.1.nip.io", "h", none));
  CHECK_FALSE(host_header_allowed("[::1", "h", none));
  // Strictly host[:port]: the port all digits, IPv6 bracketed, no empty label, no zone id.
  CHECK_FALSE(host_header_allowed("localhost:evil.com", "h", none));
  CHECK_FALSE(host_header_allowed("localhost:", "h", none));
  CHECK_FALSE(host_header_allowed(":80", "h", none));
  CHECK_FALSE(host_header_allowed("localhost..", "h", none));
  CHECK_FALSE(host_header_allowed(".", "h", none));
  CHECK_FALSE(host_header_allowed("::1", "h", none));
  CHECK_FALSE(host_header_allowed("[::1]x", "h", none));
  CHECK_FALSE(host_header_allowed("[fe80::1%25evil]", "h", none));
  CHECK_FALSE(host_header_allowed("[evil.com]", "h", none));
  CHECK_FALSE(host_header_allowed("evil.com@localhost", "h", none));
  CHECK_FALSE(host_header_allowed("localhost,evil.com", "h", none));
  CHECK_FALSE(host_header_allowed("localhost/evil", "h", none));
  CHECK(host_header_allowed("[::ffff:1.2.3.4]", "h", none));
  CHECK(host_header_allowed("svc.ns:80", "h", {"svc.ns"}));
  CHECK(host_header_allowed("anything", "h", {"*"}));
}

TEST_CASE("a bad address is a usage error; a taken port is 69") {
  boost::asio::io_context io;
  StatusServer first(io, provider);
  auto bad = first.open("not-an-ip", 0);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().exit_code == 2);
  auto port = first.open("127.0.0.1", 0);
  REQUIRE(port);
  StatusServer second(io, provider);
  auto taken = second.open("127.0.0.1", *port);
  REQUIRE_FALSE(taken);
  CHECK(taken.error().exit_code == 69);
}

TEST_CASE("the Unix socket: 0600, no Host check, removed by close(); a path too long is refused") {
  boost::asio::io_context io;
  char dir[] = "/tmp/ddprun_status_sock_XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/status.sock";
  {
    StatusServer server(io, provider);
    REQUIRE(server.open_local(path));
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
    std::string reply;
    std::atomic<bool> done{false};
    std::thread client([&] {
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        // A name no TCP endpoint would answer: no page can reach a Unix socket.
        const std::string request =
            "GET /healthz HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n";
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        char buf[4096];
        ssize_t n;
        while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<size_t>(n));
      }
      ::close(fd);
      done = true;
    });
    run_until(io, [&] { return done.load(); });
    client.join();
    CHECK(reply.find("200 OK") != std::string::npos);
    server.close();
    CHECK(::access(path.c_str(), F_OK) != 0);
  }
  StatusServer server(io, provider);
  auto too_long = server.open_local(std::string(dir) + "/" + std::string(120, 'd') + ".sock");
  REQUIRE_FALSE(too_long);
  CHECK(too_long.error().exit_code == 70);
  CHECK(too_long.error().message.find("too long") != std::string::npos);
  ::rmdir(dir);
}
