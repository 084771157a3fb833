// SPDX-License-Identifier: MIT
#pragma once
/// StatusServer (--status-port): a small HTTP/1.1 server on the agent's loop (Boost.Beast) for
/// GET /healthz, /status and /metrics. What each path answers is the owner's (a Provider); this
/// file only speaks HTTP and keeps hostile clients from costing anything:
///   - at most `max_connections` at once (further ones are closed at accept);
///   - a whole request at most `max_request_bytes`: header, body, and a chunked body's chunk-size
///     lines and trailer (answered 431);
///   - every connection closed after `idle_timeout` without a complete request or response
///     (slow-loris clients included), keep-alive or not;
///   - a failed accept (out of descriptors) retried after 50 ms doubling to 1 s, never spinning;
///   - when all `max_connections` are taken, the one that has waited longest for a request is
///     closed to make room: idle connections held open cannot starve a liveness probe;
///   - a request whose Host header names something else than this server (DNS rebinding: a
///     page at http://attacker.example:PORT/ resolved to 127.0.0.1) is answered 421 and nothing
///     else (host_header_allowed below).

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/common/result.hpp"

namespace ddp::launcher::health {

struct HttpAnswer {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct StatusServerLimits {
  size_t max_connections = 16;
  size_t max_request_bytes = 8192;
  std::chrono::milliseconds idle_timeout{5000};
};

/// Whether a request's Host header (the value as sent, strictly host[:port], the port all digits,
/// IPv6 bracketed) may be answered: an IP address literal, "localhost" and names under
/// ".localhost", this machine's `hostname` (as given, and its first label), or one of `allowed`
/// (--status-allow-host; "*" allows any). Case and one trailing dot are ignored; an empty value
/// is refused (a request with no Host header at all is the session's decision: HTTP/1.0 only).
bool host_header_allowed(std::string_view host_header, const std::string& hostname,
                         const std::vector<std::string>& allowed);

class StatusServer {
 public:
  /// Answers a GET (or HEAD) for `target` (the path, query string removed).
  using Provider = std::function<HttpAnswer(const std::string& target)>;

  StatusServer(boost::asio::io_context& io, Provider provider, StatusServerLimits limits = {});
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  /// Listens on address:port (0: a free port). Returns the port. Error: exit 2 for a bad
  /// address, 69 (EX_UNAVAILABLE) when the port cannot be bound.
  Result<int> open(const std::string& address, int port);
  /// Names a Host header may carry besides the defaults (host_header_allowed); before open().
  void allow_hosts(std::vector<std::string> names, std::string hostname);
  void close();
  size_t connections() const { return *active_; }

 private:
  class Session;
  struct Waiting;  // the sessions waiting for a request, oldest first
  void accept();

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;  // accept failed (EMFILE): try again later
  std::chrono::milliseconds accept_delay_{0};
  Provider provider_;
  StatusServerLimits limits_;
  std::shared_ptr<size_t> active_ = std::make_shared<size_t>(0);
  std::shared_ptr<bool> closed_ = std::make_shared<bool>(false);
  std::shared_ptr<Waiting> waiting_;
  std::vector<std::string> allowed_hosts_;
  std::string hostname_;
};

}  // namespace ddp::launcher::health
