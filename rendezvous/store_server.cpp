#include "rendezvous/store_server.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <new>
#include <optional>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "rendezvous/access_policy.hpp"
#include "rendezvous/command_handler.hpp"
#include "rendezvous/log.hpp"
#include "rendezvous/store_session.hpp"

namespace ddp::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::size_t kScratchBytes = std::size_t{64} * 1024;
constexpr int kListenBacklog = 65535;  // the kernel caps it at net.core.somaxconn
// Accept failures (out of descriptors or memory) back off exponentially between these bounds
// instead of spinning, and are logged at most once per kAcceptLogInterval with a count.
constexpr auto kAcceptRetryFirst = std::chrono::milliseconds(50);
constexpr auto kAcceptRetryMax = std::chrono::milliseconds(1000);
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);
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

// One line per request for --trace: connection, generation, command, keys (printable part) and
// sizes.
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
  if (cmd.op == Op::Ping || cmd.op == Op::Validate || cmd.op == Op::Tagged)
    line += fmt::format(" {:#x}", cmd.word);
  return line;
}

}  // namespace

struct StoreServer::Core : SessionHost, std::enable_shared_from_this<StoreServer::Core> {
  Core(asio::io_context& io_context, const StoreServerOptions& opts)
      : io(io_context),
        acceptor(io_context),
        retry_timer(io_context),
        sweep_timer(io_context),
        options(opts),
        scratch(kScratchBytes, '\0') {}

  const StoreLimits& limits() const override { return options.limits; }
  std::string& scratch_buffer() override { return scratch; }

  void listen() {
    const tcp::endpoint endpoint = resolve_bind_endpoint(io, options);
    auto fail = [&](const boost::system::error_code& ec) {
      boost::system::error_code ignored;
      acceptor.close(ignored);
      throw StoreBindError(fmt::format("cannot listen on {}:{}: {}", options.bind_address,
                                       options.port, os_reason(ec)));
    };
    boost::system::error_code ec;
    // These return void under BOOST_ASIO_NO_DEPRECATED (CMakeLists.txt): ec is read after each.
    acceptor.open(endpoint.protocol(), ec);
    if (ec) fail(ec);
    // Lets a restarted server reuse a port whose old connections sit in TIME_WAIT; on Linux it
    // does not allow two listeners on one port, so "address already in use" is still reported.
    acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (ec) fail(ec);
    acceptor.bind(endpoint, ec);
    if (ec) fail(ec);
    set_connection_options(acceptor);
    acceptor.listen(kListenBacklog, ec);
    if (ec) fail(ec);
    port = acceptor.local_endpoint().port();
  }

  void accept_next() {
    if (stopped) return;
    acceptor.async_accept(
        [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
          self->on_accept(ec, std::move(socket));
        });
  }

  void on_accept(const boost::system::error_code& ec, tcp::socket socket) {
    if (stopped || ec == asio::error::operation_aborted) return;
    if (ec) {
      retry_accept_later(ec);
      return;
    }
    accept_delay = std::chrono::milliseconds(0);
    if (sessions.size() >= options.limits.max_connections) {
      boost::system::error_code peer_ec;
      auto peer = socket.remote_endpoint(peer_ec);
      log_closed_for_error(
          fmt::format("refusing connection from {}:{}: connection limit {} reached",
                      peer.address().to_string(), peer.port(), options.limits.max_connections));
      socket.close(peer_ec);
      ++connections_refused;
    } else {
      try {
        const ClientId id = next_id++;
        ++connections_accepted;
        auto session = std::make_shared<StoreSession>(std::move(socket), id, shared_from_this());
        sessions.emplace(id, session);
        session->start();
      } catch (const std::bad_alloc&) {
        // The new connection's socket is closed by unwinding; the others keep being served.
        log_closed_for_error("refusing a connection: out of memory");
      }
    }
    accept_next();
  }

  // Out of descriptors or memory: existing clients keep going, accepting waits (50 ms doubling
  // up to 1 s) and the log gets one line per kAcceptLogInterval with the count.
  void retry_accept_later(const boost::system::error_code& ec) {
    const auto now = std::chrono::steady_clock::now();
    ++accept_failures_unlogged;
    if (accept_log_time == std::chrono::steady_clock::time_point{} ||
        now - accept_log_time >= kAcceptLogInterval) {
      log_line(fmt::format(
          "accept failed: {} ({} time{} since the last report); backing off up to {} ms",
          os_reason(ec), accept_failures_unlogged, accept_failures_unlogged == 1 ? "" : "s",
          kAcceptRetryMax.count()));
      accept_log_time = now;
      accept_failures_unlogged = 0;
    }
    accept_delay =
        accept_delay.count() == 0 ? kAcceptRetryFirst : std::min(accept_delay * 2, kAcceptRetryMax);
    retry_timer.expires_after(accept_delay);
    retry_timer.async_wait([self = shared_from_this()](const boost::system::error_code& timer_ec) {
      if (!timer_ec) self->accept_next();
    });
  }

  void handle(StoreSession& session, Generation gen, Command&& cmd, bool first_request) override {
    ++requests[static_cast<std::size_t>(cmd.op)];
    if (options.trace) log_line(describe_request(session.id(), gen, cmd));
    std::optional<Outcome> screened;
    if (options.access_policy && !(gen == Generation::G2 && first_request)) {
      screened = options.access_policy->screen(model, session.id(), cmd, options.limits);
    }
    Outcome outcome =
        screened
            ? std::move(*screened)
            : handle_command(model, session.id(), gen, std::move(cmd), first_request,
                             options.limits, session.tagged() ? Framing::Tagged : Framing::Plain);
    if (outcome.close_reason) {
      session.close_for_error(*outcome.close_reason);
    } else {
      if (outcome.tags_on) session.tag_messages();  // TAGGED's own reply is the first tagged
      session.send(outcome.reply);
    }
    if (!outcome.effects.woken.empty() || !outcome.effects.events.empty()) deliver(outcome.effects);
  }

  // STOP_WAITING to woken clients, notifications to watchers: a G1 watcher gets the 1.13 frame
  // (key, old and new value), a tagged connection the short one (key only); each built once,
  // when a watcher first needs it.
  void deliver(const Effects& effects) {
    static constexpr char kStop = static_cast<char>(kStopWaiting);
    for (ClientId id : effects.woken) {
      if (auto it = sessions.find(id); it != sessions.end()) {
        auto session = it->second;  // alive even if send() closes it
        session->send(std::string_view(&kStop, 1));
      }
    }
    for (const auto& event : effects.events) {
      std::optional<std::string> full, short_form;
      for (ClientId id : *event.watchers) {
        auto it = sessions.find(id);
        if (it == sessions.end()) continue;
        auto session = it->second;
        auto& frame = session->tagged() ? short_form : full;
        try {
          if (!frame) {
            frame = session->tagged() ? encode_key_event(event.type, event.key)
                                      : encode_watch_event(event.type, event.key, event.old_value,
                                                           event.new_value);
          }
        } catch (const std::bad_alloc&) {
          // The change is made; a watcher that cannot be told is closed rather than left stale.
          session->close_for_error("out of memory for a watch notification");
          continue;
        }
        session->send(*frame, StoreSession::Message::Event);
      }
    }
  }

  // Server-wide totals: while one is past its limit, close the connection holding the most.
  // Only growth can take a total past its limit, so only growth looks for a victim.
  void input_bytes_changed(StoreSession&, std::ptrdiff_t delta) override {
    buffered_input_bytes =
        static_cast<std::size_t>(static_cast<std::ptrdiff_t>(buffered_input_bytes) + delta);
    if (delta <= 0) return;
    while (buffered_input_bytes > options.limits.max_total_input_bytes) {
      auto victim = largest(&StoreSession::held_input_bytes);
      if (!victim) break;
      victim->close_for_error(
          fmt::format("holds {} bytes of unfinished requests while all connections together "
                      "hold more than the limit of {} bytes",
                      victim->held_input_bytes(), options.limits.max_total_input_bytes));
    }
  }

  void output_bytes_changed(StoreSession&, std::ptrdiff_t delta) override {
    buffered_output_bytes =
        static_cast<std::size_t>(static_cast<std::ptrdiff_t>(buffered_output_bytes) + delta);
    if (delta <= 0) return;
    while (buffered_output_bytes > options.limits.max_total_output_bytes) {
      auto victim = largest(&StoreSession::pending_output_bytes);
      if (!victim) break;
      victim->close_for_error(
          fmt::format("is owed {} bytes it does not read while all connections together "
                      "are owed more than the limit of {} bytes",
                      victim->pending_output_bytes(), options.limits.max_total_output_bytes));
    }
  }

  std::shared_ptr<StoreSession> largest(std::size_t (StoreSession::*measure)() const) const {
    std::shared_ptr<StoreSession> best;
    std::size_t best_bytes = 0;
    for (const auto& [id, session] : sessions) {
      const std::size_t bytes = ((*session).*measure)();
      if (bytes > best_bytes) {
        best_bytes = bytes;
        best = session;
      }
    }
    return best;
  }

  std::uint64_t progress_tick() const override { return tick; }

  // --idle-timeout: every sweep_period the tick advances and connections that have been in the
  // middle of a request, or owed output, with no byte moved for the timeout are closed.
  void start_sweeps() {
    const auto idle = options.limits.idle_timeout;
    if (idle.count() <= 0) return;
    sweep_period =
        std::clamp(idle / 4, std::chrono::milliseconds(25), std::chrono::milliseconds(1000));
    idle_ticks = static_cast<std::uint64_t>((idle + sweep_period - std::chrono::milliseconds(1)) /
                                            sweep_period);
    arm_sweep();
  }

  void arm_sweep() {
    if (stopped) return;
    sweep_timer.expires_after(sweep_period);
    sweep_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      self->sweep();
      self->arm_sweep();
    });
  }

  void sweep() {
    ++tick;
    std::vector<std::shared_ptr<StoreSession>> stalled;
    for (const auto& [id, session] : sessions) {
      if (session->awaiting_progress() && tick - session->last_progress_tick() > idle_ticks)
        stalled.push_back(session);
    }
    const double seconds = std::chrono::duration<double>(options.limits.idle_timeout).count();
    for (auto& session : stalled) {
      session->close_for_error(
          fmt::format("no progress on a request or reply for {:g} s (--idle-timeout)", seconds));
    }
  }

  void log_closed_for_error(const std::string& line) override {
    const auto now = std::chrono::steady_clock::now();
    if (now - error_window_start >= std::chrono::seconds(1)) {
      if (error_lines_suppressed > 0) {
        log_line(fmt::format(
            "{} more connections were closed for errors in the last second (not logged)",
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

  void session_closed(ClientId id, bool for_error) override {
    if (options.access_policy) options.access_policy->forget(id);
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
    sweep_timer.cancel();
    auto open = sessions;  // closing erases from `sessions`
    for (auto& [id, session] : open) session->close();
  }

  asio::io_context& io;
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  asio::steady_timer sweep_timer;
  StoreServerOptions options;
  std::string scratch;
  StoreModel model;
  std::unordered_map<ClientId, std::shared_ptr<StoreSession>> sessions;
  ClientId next_id = 1;
  std::uint16_t port = 0;
  bool stopped = false;
  std::size_t closed_for_errors = 0;
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_refused = 0;
  std::array<std::uint64_t, kOpCount> requests{};  // by Op
  std::size_t buffered_input_bytes = 0;            // all sessions' unfinished requests
  std::size_t buffered_output_bytes = 0;           // all sessions' owed output
  std::uint64_t tick = 0;
  std::chrono::milliseconds sweep_period{1000};
  std::uint64_t idle_ticks = 0;
  std::chrono::milliseconds accept_delay{0};
  std::chrono::steady_clock::time_point accept_log_time{};
  std::size_t accept_failures_unlogged = 0;
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

void StoreServer::start() {
  core_->accept_next();
  core_->start_sweeps();
}

void StoreServer::stop() { core_->stop(); }

StoreServerStats StoreServer::stats() const {
  StoreServerStats s;
  s.connections = core_->sessions.size();
  s.keys = static_cast<std::size_t>(core_->model.num_keys());
  s.pending_waits = core_->model.pending_wait_count();
  s.watch_registrations = core_->model.watch_registration_count();
  s.closed_for_errors = core_->closed_for_errors;
  s.buffered_input_bytes = core_->buffered_input_bytes;
  s.buffered_output_bytes = core_->buffered_output_bytes;
  s.store_bytes = core_->model.held_bytes();
  s.connections_accepted = core_->connections_accepted;
  s.connections_refused = core_->connections_refused;
  s.requests = core_->requests;
  return s;
}

}  // namespace ddp::rdzv
