// SPDX-License-Identifier: MIT
#pragma once
/// StatusServer: a small HTTP/1.1 server on the agent's loop (Boost.Beast) for GET /healthz,
/// /status and /metrics, on TCP (--status-port) and on a Unix socket in the run directory (always
/// on, mode 0600: how `ddprun top` finds a local job started without --status-port). What each
/// path answers is the owner's (a Provider); this file only speaks HTTP and keeps hostile clients
/// from costing anything, the same on both transports (they share the limits below):
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
///     else (host_header_allowed below). The Unix socket has no such check: no browser page can
///     reach it, and a tool there (`curl --unix-socket`) may send any Host.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
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
  /// Listens on a Unix stream socket at `path` too (made 0600: this user only; a socket file
  /// already there is replaced). The file is removed by close(). Error (exit 70): the path is
  /// too long for a socket (sun_path: 107 bytes) or cannot be bound.
  Result<Ok> open_local(const std::string& path);
  /// Names a Host header may carry besides the defaults (host_header_allowed); before open().
  void allow_hosts(std::vector<std::string> names, std::string hostname);
  /// Stops listening on both transports and removes the Unix socket's file.
  void close();
  size_t connections() const { return *active_; }
  const std::string& local_path() const { return local_path_; }

 private:
  struct Evictable;
  template <class Protocol>
  class Session;
  struct Waiting;  // the sessions waiting for a request, oldest first
  template <class Protocol>
  struct Listener;  // an acceptor and its retry back-off
  template <class Protocol>
  void accept(Listener<Protocol>& listener, bool check_host);

  boost::asio::io_context& io_;
  std::unique_ptr<Listener<boost::asio::ip::tcp>> tcp_;
  std::unique_ptr<Listener<boost::asio::local::stream_protocol>> local_;
  std::string local_path_;
  Provider provider_;
  StatusServerLimits limits_;
  std::shared_ptr<size_t> active_ = std::make_shared<size_t>(0);
  std::shared_ptr<bool> closed_ = std::make_shared<bool>(false);
  std::shared_ptr<Waiting> waiting_;
  std::vector<std::string> allowed_hosts_;
  std::string hostname_;
};

}  // namespace ddp::launcher::health
