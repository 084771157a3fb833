// SPDX-License-Identifier: MIT
// StatusServer with real TCP clients on 127.0.0.1: answers, errors, and hostile clients (too
// large, too many, too slow) that must cost the loop nothing.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
  auto ok =
      exchange(io, *port, "GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  CHECK(ok.starts_with("HTTP/1.1 200 OK"));
  CHECK(ok.find("\r\n\r\nok\n") != std::string::npos);
  CHECK(exchange(io, *port, "GET /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .starts_with("HTTP/1.1 404"));
  CHECK(exchange(io, *port, "POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
            .starts_with("HTTP/1.1 405"));
  auto head = exchange(io, *port, "HEAD /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  CHECK(head.starts_with("HTTP/1.1 200"));
  CHECK(head.find("ok\n") == std::string::npos);
}

TEST_CASE("keep-alive: two requests on one connection") {
  boost::asio::io_context io;
  StatusServer server(io, provider, {16, 8192, std::chrono::milliseconds(300)});
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  auto reply =
      exchange(io, *port,
               "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
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
      "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Junk: " + std::string(4000, 'j') + "\r\n\r\n";
  CHECK(exchange(io, *port, big).starts_with("HTTP/1.1 431"));
}

TEST_CASE("a client that never completes its request is cut off; others are served meanwhile") {
  boost::asio::io_context io;
  StatusServer server(io, provider, {16, 8192, std::chrono::milliseconds(300)});
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  int slow = connect_to(*port);
  ::send(slow, "GET /hea", 8, MSG_NOSIGNAL);
  CHECK(exchange(io, *port, "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
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

TEST_CASE("connections over the limit are closed at once; the limit holds") {
  boost::asio::io_context io;
  StatusServer server(io, provider, {2, 8192, std::chrono::milliseconds(5000)});
  auto port = server.open("127.0.0.1", 0);
  REQUIRE(port);
  int a = connect_to(*port);
  int b = connect_to(*port);
  CHECK(run_until(io, [&] { return server.connections() == 2; }));
  int c = connect_to(*port);
  std::atomic<bool> refused{false};
  std::thread reader([&] {
    char buf[64];
    while (::recv(c, buf, sizeof buf, 0) > 0) {
    }
    refused = true;
  });
  CHECK(run_until(io, [&] { return refused.load(); }));
  reader.join();
  CHECK(server.connections() == 2);
  for (int fd : {a, b, c}) ::close(fd);
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
