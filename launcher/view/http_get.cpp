// SPDX-License-Identifier: MIT
#include "launcher/view/http_get.hpp"

#include <fmt/format.h>

#include <boost/asio/ip/tcp.hpp>
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

constexpr size_t kMaxBody = 16u << 20;

struct Get : std::enable_shared_from_this<Get> {
  Get(boost::asio::io_context& io, std::function<void(Result<std::string>)> done)
      : resolver(io), stream(io), done(std::move(done)) {}
  tcp::resolver resolver;
  beast::tcp_stream stream;
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
};

}  // namespace

void async_http_get(boost::asio::io_context& io, const std::string& host, int port,
                    const std::string& path, std::chrono::milliseconds timeout,
                    std::function<void(Result<std::string>)> done) {
  auto g = std::make_shared<Get>(io, std::move(done));
  const bool v6 = host.find(':') != std::string::npos;
  g->where = fmt::format("http://{}:{}{}", v6 ? "[" + host + "]" : host, port, path);
  g->request = {http::verb::get, path, 11};
  g->request.set(http::field::host, fmt::format("{}:{}", v6 ? "[" + host + "]" : host, port));
  g->request.set(http::field::user_agent, "ddprun-top");
  g->request.keep_alive(false);
  g->parser.emplace();
  g->parser->body_limit(kMaxBody);
  g->stream.expires_after(timeout);
  g->resolver.async_resolve(
      host, std::to_string(port),
      [g](beast::error_code ec, const tcp::resolver::results_type& results) {
        if (ec) return g->fail("cannot resolve the host", ec);
        g->stream.async_connect(results, [g](beast::error_code ec, const tcp::endpoint&) {
          if (ec) return g->fail("cannot connect", ec);
          http::async_write(g->stream, g->request, [g](beast::error_code ec, size_t) {
            if (ec) return g->fail("cannot send the request", ec);
            http::async_read(g->stream, g->buffer, *g->parser, [g](beast::error_code ec, size_t) {
              if (ec) return g->fail("no complete answer", ec);
              beast::error_code ignored;
              g->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
              auto& response = g->parser->get();
              if (response.result() != http::status::ok) {
                return g->fail(fmt::format("HTTP {}", response.result_int()), {});
              }
              auto d = std::move(g->done);
              g->done = nullptr;
              if (d) d(std::move(response.body()));
            });
          });
        });
      });
}

}  // namespace ddp::launcher::view
