#include "rendezvous/store_server.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cctype>
#include <unordered_map>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "rendezvous/command_handler.hpp"
#include "rendezvous/log.hpp"
#include "rendezvous/store_session.hpp"

namespace ddp::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::size_t kScratchBytes = 64 * 1024;
constexpr int kListenBacklog = 65535;  // the kernel caps it at net.core.somaxconn
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
// A scanner or a broken client fleet must not flood the log: at most this many "closing
// connection" lines per second, then one line counting the ones left out.
constexpr int kErrorLinesPerSecond = 50;

std::string os_reason(const boost::system::error_code& ec) {
  std::string text = ec.message();
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

// Set on the listening socket: accepted connections inherit TCP_NODELAY and the keepalive
// settings, which saves five system calls per connection (it matters at 16k connections).
// Keepalive notices half-open peers (host died, cable cut) after about two minutes, not never.
void set_connection_options(tcp::acceptor& acceptor) {
  boost::system::error_code ignored;
  acceptor.set_option(tcp::no_delay(true), ignored);
  acceptor.set_option(asio::socket_base::keep_alive(true), ignored);
  const int fd = acceptor.native_handle();
  const int idle = 60, interval = 10, count = 6;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

tcp::endpoint resolve_bind_endpoint(asio::io_context& io, const StoreServerOptions& opts) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(opts.bind_address, ec);
  if (!ec) return tcp::endpoint(address, opts.port);
  tcp::resolver resolver(io);
  auto results = resolver.resolve(opts.bind_address, std::to_string(opts.port), ec);
  if (ec || results.empty()) {
    throw StoreBindError(fmt::format("cannot listen on {}:{}: cannot resolve the address: {}",
                                     opts.bind_address, opts.port, os_reason(ec)));
  }
  // A name such as "localhost" may resolve to ::1 first; PyTorch clients given the same name
  // try IPv4 too, so prefer an IPv4 address when the name has one.
  for (const auto& entry : results) {
    if (entry.endpoint().address().is_v4()) return entry.endpoint();
  }
  return results.begin()->endpoint();
}

// One line per request for --trace: connection, generation, command, keys (printable part) and sizes.
std::string describe_request(ClientId id, Generation gen, const Command& cmd) {
  std::string line = fmt::format("trace conn={} {} {}", id, generation_name(gen), op_name(cmd.op));
  for (std::size_t i = 0; i < cmd.keys.size() && i < 8; ++i) {
    std::string printable;
    for (char c : cmd.keys[i].substr(0, 120)) printable += (c >= 0x20 && c < 0x7f) ? c : '?';
    line += fmt::format(" '{}'", printable);
  }
  if (cmd.keys.size() > 8) line += fmt::format(" ...({} keys)", cmd.keys.size());
  for (const auto& v : cmd.values) line += fmt::format(" [{}B]", v.size());
  if (cmd.op == Op::Add || cmd.op == Op::Barrier) line += fmt::format(" {}", cmd.number);
  if (cmd.op == Op::Ping || cmd.op == Op::Validate) line += fmt::format(" {:#x}", cmd.word);
  return line;
}

}  // namespace

struct StoreServer::Core : SessionHost, std::enable_shared_from_this<StoreServer::Core> {
  Core(asio::io_context& io_context, const StoreServerOptions& opts)
      : io(io_context), acceptor(io_context), retry_timer(io_context), options(opts), scratch(kScratchBytes, '\0') {}

  const StoreLimits& limits() const override { return options.limits; }
  std::string& scratch_buffer() override { return scratch; }

  void listen() {
    const tcp::endpoint endpoint = resolve_bind_endpoint(io, options);
    auto fail = [&](const boost::system::error_code& ec) {
      boost::system::error_code ignored;
      acceptor.close(ignored);
      throw StoreBindError(fmt::format("cannot listen on {}:{}: {}", options.bind_address, options.port,
                                       os_reason(ec)));
    };
    boost::system::error_code ec;
    if (acceptor.open(endpoint.protocol(), ec)) fail(ec);
    // Lets a restarted server reuse a port whose old connections sit in TIME_WAIT; on Linux it
    // does not allow two listeners on one port, so "address already in use" is still reported.
    if (acceptor.set_option(tcp::acceptor::reuse_address(true), ec)) fail(ec);
    if (acceptor.bind(endpoint, ec)) fail(ec);
    set_connection_options(acceptor);
    if (acceptor.listen(kListenBacklog, ec)) fail(ec);
    port = acceptor.local_endpoint().port();
  }

  void accept_next() {
    if (stopped) return;
    acceptor.async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
      self->on_accept(ec, std::move(socket));
    });
  }

  void on_accept(const boost::system::error_code& ec, tcp::socket socket) {
    if (stopped || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors or memory: back off instead of spinning; existing clients keep going.
      log_line(fmt::format("accept failed: {}; retrying in {} ms", os_reason(ec), kAcceptRetryDelay.count()));
      retry_timer.expires_after(kAcceptRetryDelay);
      retry_timer.async_wait([self = shared_from_this()](const boost::system::error_code& timer_ec) {
        if (!timer_ec) self->accept_next();
      });
      return;
    }
    if (sessions.size() >= options.limits.max_connections) {
      boost::system::error_code peer_ec;
      auto peer = socket.remote_endpoint(peer_ec);
      log_line(fmt::format("refusing connection from {}:{}: connection limit {} reached",
                           peer.address().to_string(), peer.port(), options.limits.max_connections));
      socket.close(peer_ec);
    } else {
      const ClientId id = next_id++;
      auto session = std::make_shared<StoreSession>(std::move(socket), id, shared_from_this());
      sessions.emplace(id, session);
      session->start();
    }
    accept_next();
  }

  void handle(StoreSession& session, Generation gen, Command&& cmd, bool first_request) override {
    if (options.trace) log_line(describe_request(session.id(), gen, cmd));
    Outcome outcome = handle_command(model, session.id(), gen, std::move(cmd), first_request);
    if (outcome.close_reason) {
      session.close_for_error(*outcome.close_reason);
    } else {
      session.send(outcome.reply);
    }
    deliver(outcome.effects);
  }

  void deliver(const Effects& effects) {
    static constexpr char kStop = static_cast<char>(kStopWaiting);
    for (ClientId id : effects.woken) {
      if (auto it = sessions.find(id); it != sessions.end()) it->second->send(std::string_view(&kStop, 1));
    }
    for (const auto& event : effects.events) {
      if (auto it = sessions.find(event.watcher); it != sessions.end()) {
        it->second->send(encode_watch_event(event.type, event.key, event.old_value, event.new_value));
      }
    }
  }

  void log_closed_for_error(const std::string& line) override {
    const auto now = std::chrono::steady_clock::now();
    if (now - error_window_start >= std::chrono::seconds(1)) {
      if (error_lines_suppressed > 0) {
        log_line(fmt::format("{} more connections were closed for errors in the last second (not logged)",
                             error_lines_suppressed));
      }
      error_window_start = now;
      error_lines_in_window = 0;
      error_lines_suppressed = 0;
    }
    if (error_lines_in_window < kErrorLinesPerSecond) {
      ++error_lines_in_window;
      log_line(line);
    } else {
      ++error_lines_suppressed;
    }
  }

  std::size_t note_input_bytes(std::ptrdiff_t delta) override {
    buffered_input_bytes = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(buffered_input_bytes) + delta);
    return buffered_input_bytes;
  }

  void session_closed(ClientId id, bool for_error) override {
    model.remove_client(id);
    sessions.erase(id);
    if (for_error) ++closed_for_errors;
  }

  void stop() {
    if (stopped) return;
    stopped = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    retry_timer.cancel();
    auto open = sessions;  // closing erases from `sessions`
    for (auto& [id, session] : open) session->close();
  }

  asio::io_context& io;
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  StoreServerOptions options;
  std::string scratch;
  StoreModel model;
  std::unordered_map<ClientId, std::shared_ptr<StoreSession>> sessions;
  ClientId next_id = 1;
  std::uint16_t port = 0;
  bool stopped = false;
  std::size_t closed_for_errors = 0;
  std::size_t buffered_input_bytes = 0;  // all sessions' unparsed input
  std::chrono::steady_clock::time_point error_window_start{};
  int error_lines_in_window = 0;
  std::size_t error_lines_suppressed = 0;
};

StoreServer::StoreServer(asio::io_context& io, const StoreServerOptions& opts)
    : core_(std::make_shared<Core>(io, opts)) {
  core_->listen();
}

StoreServer::~StoreServer() { core_->stop(); }

std::uint16_t StoreServer::port() const { return core_->port; }

void StoreServer::start() { core_->accept_next(); }

void StoreServer::stop() { core_->stop(); }

StoreServerStats StoreServer::stats() const {
  StoreServerStats s;
  s.connections = core_->sessions.size();
  s.keys = static_cast<std::size_t>(core_->model.num_keys());
  s.pending_waits = core_->model.pending_wait_count();
  s.watch_registrations = core_->model.watch_registration_count();
  s.closed_for_errors = core_->closed_for_errors;
  s.buffered_input_bytes = core_->buffered_input_bytes;
  return s;
}

}  // namespace ddp::rdzv
