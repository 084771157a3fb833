// SPDX-License-Identifier: MIT
#include "launcher/health/status_server.hpp"

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <map>

#include "common/exit_codes.hpp"

namespace ddp::launcher::health {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {
constexpr std::chrono::milliseconds kAcceptRetryFirst{50};
constexpr std::chrono::milliseconds kAcceptRetryMax{1000};

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}
}  // namespace

namespace {
bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 5 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// A DNS name or IPv4 literal: dot-separated non-empty labels of letters, digits, '-' and '_',
/// at most one trailing dot (the absolute form).
bool plain_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return false;
  size_t label = 0;
  for (char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
      ++label;
    } else {
      return false;
    }
  }
  return label > 0;
}
}  // namespace

bool host_header_allowed(std::string_view header, const std::string& hostname,
                         const std::vector<std::string>& allowed) {
  while (!header.empty() && (header.front() == ' ' || header.front() == '\t'))
    header.remove_prefix(1);
  while (!header.empty() && (header.back() == ' ' || header.back() == '\t'))
    header.remove_suffix(1);
  if (header.empty()) return false;  // a Host header with no name names nothing of ours
  // Strictly host[:port] (RFC 9110 section 7.2): the port all digits, an IPv6 literal bracketed.
  std::string_view name = header;
  if (name.front() == '[') {  // [v6]:port
    const auto close = name.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = name.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || !all_digits(rest.substr(1)))) return false;
    const std::string v6(name.substr(1, close - 1));
    if (v6.find('%') != std::string::npos) return false;  // a zone id names no host of ours
    boost::system::error_code ec;
    boost::asio::ip::make_address_v6(v6, ec);
    return !ec;  // an address: no name a rebinding attack could point elsewhere
  }
  if (auto colon = name.find(':'); colon != std::string_view::npos) {
    if (!all_digits(name.substr(colon + 1))) return false;  // also an unbracketed IPv6 address
    name = name.substr(0, colon);
  }
  if (!plain_name(name)) return false;
  const std::string host = lower(name);
  if (host.empty()) return false;
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (!ec) return true;  // an address: no name a rebinding attack could point elsewhere
  if (host == "localhost" || (host.size() > 10 && host.ends_with(".localhost"))) return true;
  const std::string me = lower(hostname);
  if (!me.empty() && (host == me || host == me.substr(0, me.find('.')))) return true;
  for (const auto& a : allowed) {
    if (a == "*" || lower(a) == host) return true;
  }
  return false;
}

/// The sessions waiting for a request, by the order they started waiting: when the server is full,
/// the first is closed to make room.
struct StatusServer::Evictable {
  virtual ~Evictable() = default;
  /// Closed to make room for a new connection (it waited longest for a request).
  virtual void evict() = 0;
};

struct StatusServer::Waiting {
  std::uint64_t next = 0;
  std::map<std::uint64_t, std::weak_ptr<StatusServer::Evictable>> sessions;
};

template <class Protocol>
struct StatusServer::Listener {
  explicit Listener(boost::asio::io_context& io) : acceptor(io), retry_timer(io) {}
  typename Protocol::acceptor acceptor;
  boost::asio::steady_timer retry_timer;  // accept failed (EMFILE): try again later
  std::chrono::milliseconds accept_delay{0};
};

/// One connection, on TCP or on the Unix socket (`check_host`: TCP only, see the header).
template <class Protocol>
class StatusServer::Session : public StatusServer::Evictable,
                              public std::enable_shared_from_this<StatusServer::Session<Protocol>> {
 public:
  Session(typename Protocol::socket socket, const StatusServer& server, bool check_host)
      : stream_(std::move(socket)),
        buffer_(server.limits_.max_request_bytes),
        server_(server),
        provider_(server.provider_),
        limits_(server.limits_),
        active_(server.active_),
        closed_(server.closed_),
        waiting_(server.waiting_),
        check_host_(check_host) {
    ++*active_;
  }
  ~Session() {
    --*active_;
    stop_waiting();
  }

  void evict() override { close(); }

  void read() {
    stop_waiting();
    waiting_id_ = waiting_->next++;
    waiting_->sessions.emplace(*waiting_id_, std::weak_ptr<Evictable>(this->weak_from_this()));
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
                          [self = this->shared_from_this()](beast::error_code ec, size_t bytes) {
                            self->request_bytes_ += bytes;
                            if (!ec && self->request_bytes_ > self->limits_.max_request_bytes)
                              ec = http::error::body_limit;
                            if (!ec && !self->parser_->is_done()) return self->read_more();
                            self->on_read(ec);
                          });
  }

  void stop_waiting() {
    if (waiting_id_) waiting_->sessions.erase(*waiting_id_);
    waiting_id_.reset();
  }

  void on_read(beast::error_code ec) {
    stop_waiting();
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
    // One Host, none only from an HTTP/1.0 tool (RFC 9112 section 3.2: else 400); a target in
    // absolute form (GET http://name/...) names its host too, and is checked like Host.
    const size_t hosts = request.count(http::field::host);
    std::string_view target_host;
    const std::string_view raw_target(request.target().data(), request.target().size());
    if (!raw_target.starts_with('/')) {
      constexpr std::string_view kHttp = "http://";
      if (raw_target.size() < kHttp.size() || lower(raw_target.substr(0, kHttp.size())) != kHttp) {
        return respond(HttpAnswer{400, "text/plain; charset=utf-8", "bad request target\n"}, false,
                       head);
      }
      target_host = raw_target.substr(kHttp.size());
      target_host = target_host.substr(0, target_host.find_first_of("/?#"));
    }
    if (hosts > 1 || (hosts == 0 && request.version() != 10)) {
      return respond(HttpAnswer{400, "text/plain; charset=utf-8",
                                "bad request: exactly one Host header, please\n"},
                     false, head);
    }
    const auto host = request[http::field::host];
    auto allowed = [&](std::string_view name) {
      return host_header_allowed(name, server_.hostname_, server_.allowed_hosts_);
    };
    if (check_host_ && ((hosts == 1 && !allowed(std::string_view(host.data(), host.size()))) ||
                        (!raw_target.starts_with('/') && !allowed(target_host)))) {
      // DNS rebinding: a page of another site whose name now resolves to this address.
      return respond(HttpAnswer{421, "text/plain; charset=utf-8",
                                "misdirected request: this Host is not this status endpoint "
                                "(ddprun --status-allow-host NAME allows a name)\n"},
                     false, head);
    }
    std::string target(request.target());
    if (!raw_target.starts_with('/')) {  // the absolute form's path
      const auto path = target.find('/', 7);
      target = path == std::string::npos ? "/" : target.substr(path);
    }
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
                      [self = this->shared_from_this(), keep_alive](beast::error_code ec, size_t) {
                        if (ec || *self->closed_) return self->close();
                        if (keep_alive) return self->read();
                        self->close();
                      });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(Protocol::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::basic_stream<Protocol> stream_;
  beast::flat_buffer buffer_;  // at most max_request_bytes
  size_t request_bytes_ = 0;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  const StatusServer& server_;
  const Provider& provider_;
  const StatusServerLimits& limits_;
  std::shared_ptr<size_t> active_;
  std::shared_ptr<bool> closed_;
  std::shared_ptr<Waiting> waiting_;
  std::optional<std::uint64_t> waiting_id_;
  bool check_host_;
};

StatusServer::StatusServer(boost::asio::io_context& io, Provider provider,
                           StatusServerLimits limits)
    : io_(io),
      provider_(std::move(provider)),
      limits_(limits),
      waiting_(std::make_shared<Waiting>()) {}

void StatusServer::allow_hosts(std::vector<std::string> names, std::string hostname) {
  allowed_hosts_ = std::move(names);
  hostname_ = std::move(hostname);
}

StatusServer::~StatusServer() { close(); }

Result<int> StatusServer::open(const std::string& address, int port) {
  boost::system::error_code ec;
  auto ip = boost::asio::ip::make_address(address, ec);
  if (ec)
    return Error{exit_codes::kUsage,
                 fmt::format("--status-addr: '{}' is not an IP address", address)};
  tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  auto listener = std::make_unique<Listener<tcp>>(io_);
  auto& acceptor = listener->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(64, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    return Error{
        exit_codes::kUnavailable,
        fmt::format("status endpoint: cannot listen on {}:{}: {}", address, port, ec.message())};
  }
  tcp_ = std::move(listener);
  *closed_ = false;
  accept(*tcp_, /*check_host=*/true);
  return static_cast<int>(tcp_->acceptor.local_endpoint().port());
}

Result<Ok> StatusServer::open_local(const std::string& path) {
  using local = boost::asio::local::stream_protocol;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Error{exit_codes::kInternal,
                 fmt::format("status socket: the path is too long for a socket ({} bytes, "
                             "at most {}): {}",
                             path.size(), sizeof(sockaddr_un::sun_path) - 1, path)};
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
  auto listener = std::make_unique<Listener<local>>(io_);
  auto& acceptor = listener->acceptor;
  boost::system::error_code ec;
  acceptor.open(local(), ec);
  if (!ec) acceptor.bind(local::endpoint(path), ec);
  const bool bound = !ec;
  // This user only, before anyone can connect (listen comes after); the run directory is 0700
  // too.
  if (!ec && ::chmod(path.c_str(), 0600) != 0) ec.assign(errno, boost::system::system_category());
  if (!ec) acceptor.listen(64, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    if (bound) ::unlink(path.c_str());
    return Error{exit_codes::kInternal,
                 fmt::format("status socket: cannot listen on {}: {}", path, ec.message())};
  }
  local_ = std::move(listener);
  local_path_ = path;
  *closed_ = false;
  accept(*local_, /*check_host=*/false);
  return Ok{};
}

void StatusServer::close() {
  *closed_ = true;
  boost::system::error_code ignored;
  if (tcp_) {
    if (tcp_->acceptor.is_open()) tcp_->acceptor.close(ignored);
    tcp_->retry_timer.cancel();
  }
  if (local_) {
    if (local_->acceptor.is_open()) {
      local_->acceptor.close(ignored);
      ::unlink(local_path_.c_str());
    }
    local_->retry_timer.cancel();
  }
}

template <class Protocol>
void StatusServer::accept(Listener<Protocol>& listener, bool check_host) {
  listener.acceptor.async_accept(
      [this, &listener, check_host, closed = closed_](boost::system::error_code ec,
                                                      typename Protocol::socket socket) {
        if (*closed || ec == boost::asio::error::operation_aborted) return;
        if (ec) {
          // Out of descriptors (or memory): the pending connection stays queued and accept would
          // fail again at once. Back off as the store does instead of spinning a core.
          listener.accept_delay =
              std::clamp(listener.accept_delay * 2, kAcceptRetryFirst, kAcceptRetryMax);
          listener.retry_timer.expires_after(listener.accept_delay);
          listener.retry_timer.async_wait(
              [this, &listener, check_host, closed](const boost::system::error_code& wait_ec) {
                if (!wait_ec && !*closed) accept(listener, check_host);
              });
          return;
        }
        listener.accept_delay = {};
        bool room = *active_ < limits_.max_connections;
        if (!room) {
          // Full: the connection that has waited longest for a request makes room (one client's
          // idle connections must not starve a liveness probe). When every connection is busy
          // answering, the new one is refused at once.
          std::shared_ptr<Evictable> oldest;
          while (!oldest && !waiting_->sessions.empty()) {
            oldest = waiting_->sessions.begin()->second.lock();
            waiting_->sessions.erase(waiting_->sessions.begin());
          }
          if (oldest) {
            oldest->evict();  // its count goes when its pending read ends, on this loop
            room = true;
          }
        }
        if (!room) {
          boost::system::error_code ignored;
          socket.close(ignored);  // over the limit: refused at once
        } else {
          std::make_shared<Session<Protocol>>(std::move(socket), *this, check_host)->read();
        }
        accept(listener, check_host);
      });
}

}  // namespace ddp::launcher::health
