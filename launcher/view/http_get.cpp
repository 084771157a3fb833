// SPDX-License-Identifier: MIT
#include "launcher/view/http_get.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <optional>

#include "common/exit_codes.hpp"

namespace ddp::launcher::view {

namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using local = boost::asio::local::stream_protocol;

constexpr size_t kMaxBody = 16u << 20;

template <class Protocol>
struct Get : std::enable_shared_from_this<Get<Protocol>> {
  Get(boost::asio::io_context& io, std::function<void(Result<std::string>)> done)
      : stream(io), done(std::move(done)) {}
  beast::basic_stream<Protocol> stream;
  beast::flat_buffer buffer;
  http::request<http::empty_body> request;
  std::optional<http::response_parser<http::string_body>> parser;
  std::function<void(Result<std::string>)> done;
  std::string where;

  void fail(const std::string& what, beast::error_code ec) {
    if (!done) return;
    auto d = std::move(done);
    done = nullptr;
    d(Error{exit_codes::kUnavailable, fmt::format("cannot read {}: {}{}", where, what,
                                                  ec ? ": " + ec.message() : std::string())});
  }

  /// Connected: the request, then the answer.
  void exchange() {
    http::async_write(
        stream, request, [g = this->shared_from_this()](beast::error_code ec, size_t) {
          if (ec) return g->fail("cannot send the request", ec);
          http::async_read(g->stream, g->buffer, *g->parser, [g](beast::error_code ec, size_t) {
            if (ec) return g->fail("no complete answer", ec);
            beast::error_code ignored;
            g->stream.socket().shutdown(Protocol::socket::shutdown_both, ignored);
            auto& response = g->parser->get();
            if (response.result() != http::status::ok) {
              return g->fail(fmt::format("HTTP {}", response.result_int()), {});
            }
            auto d = std::move(g->done);
            g->done = nullptr;
            if (d) d(std::move(response.body()));
          });
        });
  }
};

template <class Protocol>
std::shared_ptr<Get<Protocol>> make_get(boost::asio::io_context& io, std::string where,
                                        const std::string& host_header, const std::string& path,
                                        std::chrono::milliseconds timeout,
                                        std::function<void(Result<std::string>)> done) {
  auto g = std::make_shared<Get<Protocol>>(io, std::move(done));
  g->where = std::move(where);
  g->request = {http::verb::get, path, 11};
  g->request.set(http::field::host, host_header);
  g->request.set(http::field::user_agent, "ddprun-top");
  g->request.keep_alive(false);
  g->parser.emplace();
  g->parser->body_limit(kMaxBody);
  g->stream.expires_after(timeout);
  return g;
}

}  // namespace

void async_http_get(boost::asio::io_context& io, const std::string& host, int port,
                    const std::string& path, std::chrono::milliseconds timeout,
                    std::function<void(Result<std::string>)> done) {
  const bool v6 = host.find(':') != std::string::npos;
  const std::string authority = fmt::format("{}:{}", v6 ? "[" + host + "]" : host, port);
  auto g = make_get<tcp>(io, fmt::format("http://{}{}", authority, path), authority, path, timeout,
                         std::move(done));
  auto resolver = std::make_shared<tcp::resolver>(io);
  resolver->async_resolve(
      host, std::to_string(port),
      [g, resolver](beast::error_code ec, const tcp::resolver::results_type& results) {
        if (ec) return g->fail("cannot resolve the host", ec);
        g->stream.async_connect(results, [g](beast::error_code ec, const tcp::endpoint&) {
          if (ec) return g->fail("cannot connect", ec);
          g->exchange();
        });
      });
}

void async_http_get_local(boost::asio::io_context& io, const std::string& socket_path,
                          pid_t server_pid, const std::string& path,
                          std::chrono::milliseconds timeout,
                          std::function<void(Result<std::string>)> done) {
  auto g = make_get<local>(io, fmt::format("{} ({})", socket_path, path), "localhost", path,
                           timeout, std::move(done));
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return boost::asio::post(io, [g] { g->fail("the path is too long for a socket", {}); });
  }
  g->stream.async_connect(local::endpoint(socket_path), [g, server_pid](beast::error_code ec) {
    if (ec) return g->fail("cannot connect", ec);
    // Whoever holds the path answers: a run directory removed under a running job can be
    // re-created by someone else. Only this user's ddprun, the beacon's pid, is believed.
    ucred peer{};
    socklen_t size = sizeof peer;
    if (::getsockopt(g->stream.socket().native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &size) !=
        0) {
      return g->fail("cannot tell who serves the socket",
                     beast::error_code(errno, boost::system::system_category()));
    }
    if (peer.uid != ::geteuid() || (server_pid > 0 && peer.pid != server_pid)) {
      return g->fail(fmt::format("the socket is served by pid {} of uid {}, not by this user's "
                                 "ddprun (pid {}); not read",
                                 peer.pid, peer.uid, server_pid),
                     {});
    }
    g->exchange();
  });
}

}  // namespace ddp::launcher::view
