// SPDX-License-Identifier: MIT
#include "launcher/health/status_server.hpp"

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>

namespace ddp::launcher::health {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {
constexpr std::chrono::milliseconds kAcceptRetryFirst{50};
constexpr std::chrono::milliseconds kAcceptRetryMax{1000};
}  // namespace

class StatusServer::Session : public std::enable_shared_from_this<StatusServer::Session> {
 public:
  Session(tcp::socket socket, const Provider& provider, const StatusServerLimits& limits,
          std::shared_ptr<size_t> active, std::shared_ptr<bool> closed)
      : stream_(std::move(socket)),
        buffer_(limits.max_request_bytes),
        provider_(provider),
        limits_(limits),
        active_(std::move(active)),
        closed_(std::move(closed)) {
    ++*active_;
  }
  ~Session() { --*active_; }

  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(limits_.max_request_bytes));
    parser_->body_limit(limits_.max_request_bytes);
    request_bytes_ = 0;
    stream_.expires_after(limits_.idle_timeout);
    read_more();
  }

 private:
  // The header and body limits leave out a chunked body's chunk-size lines and its trailer, and
  // the buffer would hold an endless one: the buffer is capped, and every byte the parser takes
  // counts against max_request_bytes, whatever part of the request it is.
  void read_more() {
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                            self->request_bytes_ += bytes;
                            if (!ec && self->request_bytes_ > self->limits_.max_request_bytes)
                              ec = http::error::body_limit;
                            if (!ec && !self->parser_->is_done()) return self->read_more();
                            self->on_read(ec);
                          });
  }

  void on_read(beast::error_code ec) {
    if (*closed_) return;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout) return close();
    if (ec == http::error::header_limit || ec == http::error::body_limit ||
        ec == http::error::buffer_overflow) {
      return respond(HttpAnswer{431, "text/plain; charset=utf-8", "request too large\n"}, false,
                     false);
    }
    if (ec) return close();
    const auto& request = parser_->get();
    const bool head = request.method() == http::verb::head;
    if (request.method() != http::verb::get && !head) {
      return respond(HttpAnswer{405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false,
                     false);
    }
    std::string target(request.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    respond(provider_(target), request.keep_alive(), head);
  }

  void respond(HttpAnswer answer, bool keep_alive, bool head) {
    response_.emplace();
    response_->result(static_cast<unsigned>(answer.status));
    response_->version(11);
    response_->set(http::field::server, "ddprun");
    response_->set(http::field::content_type, answer.content_type);
    response_->set(http::field::cache_control, "no-store");
    response_->keep_alive(keep_alive);
    response_->body() = std::move(answer.body);
    response_->prepare_payload();
    if (head) response_->body().clear();
    stream_.expires_after(limits_.idle_timeout);
    http::async_write(stream_, *response_,
                      [self = shared_from_this(), keep_alive](beast::error_code ec, size_t) {
                        if (ec || *self->closed_) return self->close();
                        if (keep_alive) return self->read();
                        self->close();
                      });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;  // at most max_request_bytes
  size_t request_bytes_ = 0;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  const Provider& provider_;
  const StatusServerLimits& limits_;
  std::shared_ptr<size_t> active_;
  std::shared_ptr<bool> closed_;
};

StatusServer::StatusServer(boost::asio::io_context& io, Provider provider,
                           StatusServerLimits limits)
    : io_(io), acceptor_(io), retry_timer_(io), provider_(std::move(provider)), limits_(limits) {}

StatusServer::~StatusServer() { close(); }

Result<int> StatusServer::open(const std::string& address, int port) {
  boost::system::error_code ec;
  auto ip = boost::asio::ip::make_address(address, ec);
  if (ec) return Error{2, fmt::format("--status-addr: '{}' is not an IP address", address)};
  tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(64, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    return Error{69, fmt::format("status endpoint: cannot listen on {}:{}: {}", address, port,
                                 ec.message())};
  }
  *closed_ = false;
  accept();
  return static_cast<int>(acceptor_.local_endpoint().port());
}

void StatusServer::close() {
  *closed_ = true;
  boost::system::error_code ignored;
  if (acceptor_.is_open()) acceptor_.close(ignored);
  retry_timer_.cancel();
}

void StatusServer::accept() {
  acceptor_.async_accept([this, closed = closed_](boost::system::error_code ec,
                                                  tcp::socket socket) {
    if (*closed || ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (or memory): the pending connection stays queued and accept would
      // fail again at once. Back off as the store does instead of spinning a core.
      accept_delay_ = std::clamp(accept_delay_ * 2, kAcceptRetryFirst, kAcceptRetryMax);
      retry_timer_.expires_after(accept_delay_);
      retry_timer_.async_wait([this, closed](const boost::system::error_code& wait_ec) {
        if (!wait_ec && !*closed) accept();
      });
      return;
    }
    accept_delay_ = {};
    if (*active_ >= limits_.max_connections) {
      boost::system::error_code ignored;
      socket.close(ignored);  // over the limit: refused at once
    } else {
      std::make_shared<Session>(std::move(socket), provider_, limits_, active_, closed_)->read();
    }
    accept();
  });
}

}  // namespace ddp::launcher::health
