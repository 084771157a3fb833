#include "rendezvous/etcd/etcd_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <charconv>
#include <exception>
#include <optional>

#include "rendezvous/etcd/etcd_failure.hpp"

namespace ddp::rdzv::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;

// One connection to a member, plain or TLS (a TLS stream cannot be reused once closed: every
// connection gets a fresh one). Outside the anonymous namespace: EtcdClient::Connection holds one.
class MemberStream {
 public:
  MemberStream(asio::io_context& io, ssl::context* tls) {
    if (tls != nullptr) {
      tls_.emplace(io, *tls);
    } else {
      plain_.emplace(io);
    }
  }
  beast::tcp_stream& tcp() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }
  beast::ssl_stream<beast::tcp_stream>* tls() { return tls_ ? &*tls_ : nullptr; }
  // f(the stream to read and write): both kinds give the same awaitable type.
  template <class F>
  auto with(F&& f) {
    if (tls_) return f(*tls_);
    return f(*plain_);
  }

 private:
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
};

namespace {

namespace http = beast::http;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

std::shared_ptr<ssl::context> make_tls_context(const ClientOptions::Tls& tls) {
  if (!tls.on) return nullptr;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  auto load = [](const std::string& what, const std::string& path, auto&& f) {
    try {
      f();
    } catch (const boost::system::system_error& e) {
      throw std::invalid_argument(
          fmt::format("etcd TLS: cannot load the {} '{}': {}", what, path, e.code().message()));
    }
  };
  if (tls.ca_file.empty()) {
    ctx->set_default_verify_paths();
  } else {
    load("CA file", tls.ca_file, [&] { ctx->load_verify_file(tls.ca_file); });
  }
  ctx->set_verify_mode(ssl::verify_peer);
  if (!tls.cert_file.empty()) {
    load("certificate", tls.cert_file, [&] { ctx->use_certificate_chain_file(tls.cert_file); });
    load("key", tls.key_file, [&] { ctx->use_private_key_file(tls.key_file, ssl::context::pem); });
  }
  return ctx;
}

http::request<http::string_body> make_request(const Endpoint& at, const char* path,
                                              const std::string& body,
                                              const std::string& token = {}) {
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, at.name());
  if (!token.empty()) req.set(http::field::authorization, token);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  return req;
}

asio::awaitable<void> connect(MemberStream& stream, const Endpoint& at) {
  tcp::resolver resolver(co_await asio::this_coro::executor);
  auto found = co_await resolver.async_resolve(at.host, std::to_string(at.port), use_awaitable);
  co_await stream.tcp().async_connect(found, use_awaitable);
  stream.tcp().socket().set_option(tcp::no_delay(true));
  if (auto* tls = stream.tls()) {
    // The member's certificate must name the host (or address) this client dialled.
    boost::system::error_code not_an_address;
    (void)asio::ip::make_address(at.host, not_an_address);
    if (not_an_address && !SSL_set_tlsext_host_name(tls->native_handle(), at.host.c_str()))
      throw EtcdUnavailable(fmt::format("etcd TLS: cannot set the server name '{}'", at.host));
    tls->set_verify_callback(ssl::host_name_verification(at.host));
    co_await tls->async_handshake(ssl::stream_base::client, use_awaitable);
  }
}

// Runs `task` on `io` until it ends (or `*stop` turns true: then it returns quietly, the task
// left for the io_context's destruction); rethrows what it threw.
void run_blocking(asio::io_context& io, asio::awaitable<void> task,
                  const std::atomic<bool>* stop = nullptr) {
  std::exception_ptr failed;
  bool ended = false;
  io.restart();
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
    failed = std::move(e);
    ended = true;
  });
  if (stop == nullptr) {
    io.run();
  } else {
    while (!ended && !*stop) io.run_for(std::chrono::milliseconds(50));
    if (!ended) return;
  }
  if (!ended) throw EtcdUnavailable("the etcd client's call did not end");
  if (failed) std::rethrow_exception(failed);
}

std::string reason_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& s) {
    if (s.code() == http::error::body_limit)
      return fmt::format("a reply over the client's bound of {} MiB", kMaxReplyBytes >> 20);
    return s.code() == beast::error::timeout ? std::string("no answer in time")
                                             : s.code().message();
  } catch (const std::exception& x) {
    return x.what();
  }
}

// A failure of the TLS layer (a certificate not trusted, or not given when the member asks).
bool is_tls_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& s) {
    return s.code().category() == asio::error::get_ssl_category() ||
           s.code().category() == ssl::error::get_stream_category();
  } catch (...) {
    return false;
  }
}

bool is_end_of_stream(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& s) {
    return s.code() == http::error::end_of_stream || s.code() == asio::error::eof;
  } catch (...) {
    return false;
  }
}

// A reply's cluster id against the one the job settled on (settling it when none was): the line
// saying `at` belongs to another cluster, to be that member's failure; nullopt when it does not.
std::optional<std::string> other_cluster(MemberBook& book, const Endpoint& at,
                                         const std::string& cluster_id) {
  if (cluster_id.empty()) return std::nullopt;
  const auto [settled, by] = book.settle(cluster_id, at.name());
  if (settled == cluster_id) return std::nullopt;
  return fmt::format(
      "{} is a member of etcd cluster {}, not of cluster {} that this job uses (first answered "
      "at {}): --rdzv_endpoint must list the members of one cluster",
      at.name(), cluster_id, settled, by);
}

// One member's status, asked by probe_members.
struct MemberStatus {
  bool answered = false;  // etcd answered (its status, or etcd's refusal)
  std::string cluster_id;
  std::string failure;  // not answered: why
  int order = -1;       // answered: 0 for the first member that answered, 1 for the next, ...
};

asio::awaitable<void> ask_status(MemberStream& stream, const Endpoint& at, MemberStatus& out,
                                 int& answers) {
  co_await connect(stream, at);
  auto req = make_request(at, "/v3/maintenance/status", "{}");
  req.keep_alive(false);
  co_await stream.with([&](auto& s) { return http::async_write(s, req, use_awaitable); });
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1u << 20);
  co_await stream.with([&](auto& s) { return http::async_read(s, buffer, parser, use_awaitable); });
  const ReplyVerdict verdict = classify_reply(parser.get().result_int(), parser.get().body());
  if (verdict.kind == ReplyVerdict::Kind::NextMember) {
    out.failure = verdict.line;
    co_return;
  }
  out.answered = true;  // a refusal (etcd's authentication) is etcd's answer too
  out.cluster_id = verdict.cluster_id;
  out.order = answers++;
}

// Asks the members `ask` marks for their status at once, each on a connection of its own, all
// within one deadline (a black-holed member costs no more than a healthy one's answer); ends
// early when every member asked has answered or failed, or when `enough` says so after an answer.
std::vector<MemberStatus> probe_members(
    ssl::context* tls, const std::vector<Endpoint>& members, const std::vector<bool>& ask,
    Clock::time_point deadline,
    const std::function<bool(const std::vector<MemberStatus>&)>& enough) {
  asio::io_context io{1};
  std::vector<MemberStatus> out(members.size());
  std::vector<std::unique_ptr<MemberStream>> streams(members.size());
  int answers = 0;
  std::size_t running = 0;
  bool over = false;
  asio::steady_timer limit(io, deadline);
  const auto end_all = [&] {
    over = true;
    limit.cancel();
    for (auto& s : streams) {
      beast::error_code ignored;
      if (s) s->tcp().socket().close(ignored);
    }
  };
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!ask[i]) continue;
    streams[i] = std::make_unique<MemberStream>(io, tls);
    streams[i]->tcp().expires_at(deadline);
    ++running;
    asio::co_spawn(io, ask_status(*streams[i], members[i], out[i], answers),
                   [&, i](std::exception_ptr e) {
                     if (e && !out[i].answered && out[i].failure.empty())
                       out[i].failure = over ? "no answer in time" : reason_of(e);
                     --running;
                     if (!over && (running == 0 || (out[i].answered && enough(out)))) end_all();
                   });
  }
  if (running == 0) return out;
  limit.async_wait([&](boost::system::error_code ec) {
    if (!ec && !over) end_all();
  });
  io.run();
  return out;
}

// Reads a watch response's stream on `stream` (request already written): every complete message
// goes to `on_message`, which returns false to end the read.
asio::awaitable<void> read_watch(MemberStream& stream, beast::flat_buffer& buffer,
                                 std::function<bool(const WatchMessage&)> on_message) {
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  co_await stream.with(
      [&](auto& s) { return http::async_read_header(s, buffer, parser, use_awaitable); });
  if (parser.get().result() != http::status::ok) {
    // A proxy's or a sick member's answer (502, 503, 429, 404): another member may serve it.
    throw EtcdUnavailable(fmt::format("HTTP {} to the watch", parser.get().result_int()));
  }
  WatchFramer framer;
  bool keep_reading = true;
  std::exception_ptr failed;
  auto on_chunk = [&](std::uint64_t, beast::string_view body, beast::error_code&) {
    try {
      framer.feed(std::string_view(body.data(), body.size()));
      while (keep_reading) {
        auto message = framer.next();
        if (!message) break;
        keep_reading = on_message(parse_watch_message(*message));
      }
    } catch (...) {
      failed = std::current_exception();
      keep_reading = false;
    }
    return body.size();
  };
  parser.on_chunk_body(on_chunk);  // Beast keeps a reference: on_chunk outlives the reads
  while (keep_reading && !parser.is_done()) {
    co_await stream.with(
        [&](auto& s) { return http::async_read_some(s, buffer, parser, use_awaitable); });
  }
  if (failed) std::rethrow_exception(failed);
  if (keep_reading) throw EtcdUnavailable("etcd ended the watch stream");
}

}  // namespace

std::string Endpoint::name() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

std::vector<Endpoint> parse_endpoints(std::string_view text) {
  std::vector<Endpoint> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    std::string_view part = text.substr(at, comma - at);
    Endpoint e;
    for (std::string_view scheme : {"http://", "https://"}) {
      if (part.substr(0, scheme.size()) == scheme) {
        e.https = scheme == "https://";
        part.remove_prefix(scheme.size());
        if (!out.empty() && out.back().https != e.https)
          throw std::invalid_argument(fmt::format("'{}' mixes http:// and https:// members", text));
      }
    }
    if (part.empty()) throw std::invalid_argument(fmt::format("'{}' has an empty member", text));
    // What is not that form is refused here (exit 2), not taken for a host name that never
    // resolves: another scheme or HTTP:// in capitals, user@host, a path, an IPv6 address
    // without brackets.
    const auto refuse = [&](std::string_view why) {
      return std::invalid_argument(fmt::format(
          "'{}': {}; expected [http://|https://]host[:port] or [IPv6]:port, comma-separated", part,
          why));
    };
    if (part.find("://") != std::string_view::npos)
      throw refuse("the scheme must be http:// or https:// in lower case");
    if (part.find('@') != std::string_view::npos)
      throw refuse("no user@ in a member (give the user as etcd_user)");
    if (part.find('/') != std::string_view::npos) throw refuse("a member has no path");
    if (part.front() != '[' && part.find(':') != part.rfind(':'))
      throw refuse("an IPv6 address must be in brackets");
    std::size_t colon = part.rfind(':');
    if (part.front() == '[') {  // [IPv6]:port
      const std::size_t close = part.find(']');
      if (close == std::string_view::npos || close == 1)
        throw std::invalid_argument(fmt::format("'{}' has no closing ']'", part));
      if (close + 1 < part.size() && part[close + 1] != ':')
        throw std::invalid_argument(fmt::format("'{}': ':port' must follow ']'", part));
      e.host = std::string(part.substr(1, close - 1));
      colon = close + 1 < part.size() ? close + 1 : std::string_view::npos;
    } else if (colon == std::string_view::npos) {
      e.host = std::string(part);
    } else {
      e.host = std::string(part.substr(0, colon));
    }
    if (colon != std::string_view::npos) {
      unsigned port = 0;
      auto digits = part.substr(colon + 1);
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
      if (ec != std::errc{} || end != digits.data() + digits.size() || port == 0 || port > 65535)
        throw std::invalid_argument(fmt::format("'{}' has no valid port", part));
      e.port = static_cast<std::uint16_t>(port);
    }
    if (e.host.empty()) throw std::invalid_argument(fmt::format("'{}' has no host", part));
    for (const char c : e.host) {
      const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                      c == '_' || (c == ':' && part.front() == '[') ||
                      (c == '%' && part.front() == '[');
      if (!ok) throw refuse(fmt::format("'{}' is not a host name or address", e.host));
    }
    out.push_back(std::move(e));
    at = comma + 1;
    if (out.size() > kMaxEndpoints) {
      throw std::invalid_argument(fmt::format(
          "more than {} members listed (an etcd cluster has a handful: 3, 5 or 7)", kMaxEndpoints));
    }
  }
  return out;
}

std::string describe(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (const auto& e : endpoints) {
    if (!out.empty()) out += ',';
    out += e.name();
  }
  return out;
}

std::optional<std::string> tls_setup_error(const ClientOptions::Tls& tls) {
  try {
    ClientOptions::Tls on = tls;
    on.on = true;
    (void)make_tls_context(on);
    return std::nullopt;
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
}

struct EtcdClient::Connection {
  std::optional<MemberStream> stream;  // a fresh one for every connection
  beast::flat_buffer buffer;
  bool open = false;
  void close() {
    if (stream) {
      beast::error_code ignored;
      stream->tcp().socket().close(ignored);
    }
    open = false;
    buffer.clear();
  }
};

EtcdClient::EtcdClient(ClientOptions options)
    : options_(std::move(options)),
      tls_(make_tls_context(options_.tls)),
      connection_(std::make_unique<Connection>()) {
  if (options_.endpoints.empty()) throw std::invalid_argument("no etcd endpoint was given");
  if (!options_.book) options_.book = std::make_shared<MemberBook>();
  current_ = options_.book->preferred() % options_.endpoints.size();
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::auth_token() {
  if (!options_.user.empty() && auth_token_.empty()) authenticate();
  return auth_token_;
}

void EtcdClient::authenticate() {
  try {
    auth_token_ = parse_auth_token(post_once(
        "/v3/auth/authenticate", authenticate_request(options_.user, options_.password), {}));
  } catch (const EtcdProtocolError& e) {
    throw EtcdProtocolError(fmt::format("etcd refused user '{}': {}", options_.user, e.what()));
  }
}

std::string EtcdClient::post(const char* path, const std::string& body) {
  if (options_.user.empty()) {
    try {
      return post_once(path, body, {});
    } catch (const EtcdProtocolError& e) {
      // etcd's own words do not say which setting of ours is missing.
      if (std::string(e.what()).find("user name is empty") == std::string::npos) throw;
      throw EtcdProtocolError(fmt::format(
          "{}: etcd has authentication on; give etcd_user and etcd_password_file in --rdzv_conf",
          e.what()));
    }
  }
  const std::string token = auth_token();
  try {
    return post_once(path, body, token);
  } catch (const EtcdRefused& e) {
    if (e.grpc_code() != kGrpcUnauthenticated) throw;  // etcd: "invalid auth token"
    auth_token_.clear();  // expired (--auth-token-ttl) or the member restarted: once more
    return post_once(path, body, auth_token());
  }
}

// What the tries of one call met: the line that ends it when no member gave an answer.
struct EtcdClient::CallFailures {
  explicit CallFailures(std::size_t members) : answered(members), oversized_members(members) {}
  std::string last_error = "no member was tried";
  // A refused certificate is the cause to report even when a later try only timed out (a
  // loaded machine): the timeout would hide what the user must fix.
  std::string tls_error;
  bool etcd_answered = false;  // some member is etcd and said "not now" (no leader, busy)
  // Each member's last answer that was a failure (HTTP 503, not a gateway...): the deadline can
  // cut the last try short on a loaded machine, and "no answer in time" alone would hide what
  // the members said before.
  std::vector<std::string> answered;
  std::string oversized;      // a member's reply was over kMaxReplyBytes: the line naming the bound
  std::string wrong_cluster;  // a member of another etcd cluster answered: the line naming both
  std::vector<bool> oversized_members;
};

std::string EtcdClient::post_once(const char* path, const std::string& body,
                                  const std::string& token) {
  const auto deadline = Clock::now() + options_.timeout;
  const std::size_t members = options_.endpoints.size();
  CallFailures failures(members);
  // Each member gets a share of the deadline, so that one that hangs (cut off from the leader,
  // or accepting and never answering) leaves time for the others; a round over every member is
  // followed by a short pause.
  const auto share =
      std::max<Clock::duration>(options_.timeout / (members + 1), std::chrono::milliseconds(500));
  for (std::size_t tries = 0; Clock::now() < deadline; ++tries) {
    if (tries > 0 && tries % members == 0) pause(std::chrono::milliseconds(100));
    const Endpoint& at = options_.endpoints[current_ % members];
    const auto budget = std::min<Clock::duration>(share, deadline - Clock::now());
    if (budget <= Clock::duration::zero()) break;
    const bool fresh = !connection_->open;
    try {
      auto [status, reply] = exchange(at, path, body, token, budget);
      if (auto answer = take_reply(at, status, std::move(reply), failures)) return *answer;
    } catch (const EtcdProtocolError&) {
      throw;
    } catch (const boost::system::system_error& e) {
      connection_->close();
      const auto until = std::min<Clock::time_point>(deadline, Clock::now() + share);
      if (moved_on(e.code(), std::current_exception(), at, path, fresh, until, failures)) continue;
    } catch (...) {
      connection_->close();
      failures.last_error = fmt::format("{}: {}", at.name(), reason_of(std::current_exception()));
    }
    ++current_;  // the next try (and the next call) starts on another member
  }
  throw_unanswered(failures);
}

void EtcdClient::pause(std::chrono::milliseconds duration) {
  asio::steady_timer pause(io_, duration);
  io_.restart();
  pause.async_wait([](auto) {});
  io_.run();
}

std::pair<unsigned, std::string> EtcdClient::exchange(const Endpoint& at, const char* path,
                                                      const std::string& body,
                                                      const std::string& token,
                                                      Clock::duration budget) {
  std::string reply;
  unsigned status = 0;
  auto& c = *connection_;
  // The connection is kept between calls (keep-alive); a fresh one after a failure.
  auto call = [&]() -> asio::awaitable<void> {
    if (!c.open) {
      c.stream.emplace(io_, tls_.get());
      c.buffer.clear();
    }
    c.stream->tcp().expires_after(budget);
    if (!c.open) {
      co_await connect(*c.stream, at);
      c.open = true;
    }
    auto req = make_request(at, path, body, token);
    co_await c.stream->with([&](auto& s) { return http::async_write(s, req, use_awaitable); });
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxReplyBytes);
    co_await c.stream->with(
        [&](auto& s) { return http::async_read(s, c.buffer, parser, use_awaitable); });
    status = parser.get().result_int();
    if (!parser.get().keep_alive()) c.open = false;
    reply = std::move(parser.get().body());
  };
  run_blocking(io_, call());
  if (!c.open) c.close();
  return {status, std::move(reply)};
}

std::optional<std::string> EtcdClient::take_reply(const Endpoint& at, unsigned status,
                                                  std::string reply, CallFailures& failures) {
  const std::size_t members = options_.endpoints.size();
  const ReplyVerdict verdict = classify_reply(status, reply);
  if (verdict.kind == ReplyVerdict::Kind::Answer) {
    // etcd's answer, but maybe another cluster's (a member silent at the first join's check,
    // or one replaced since): that member's failure, the next one is tried.
    if (auto other = other_cluster(*options_.book, at, verdict.cluster_id)) {
      failures.wrong_cluster = *other;
      failures.last_error = *other;
      connection_->close();
      return std::nullopt;
    }
    options_.book->prefer(current_ % members);
    return reply;
  }
  if (verdict.kind == ReplyVerdict::Kind::Refused) {
    throw EtcdRefused(
        fmt::format("etcd member {} refused the request: {}", at.name(), verdict.line),
        verdict.grpc_code);
  }
  failures.etcd_answered = failures.etcd_answered || verdict.etcd_answered;
  failures.last_error = fmt::format("{}: {}", at.name(), verdict.line);
  failures.answered[current_ % members] = failures.last_error;
  connection_->close();  // the next try goes to another member, on a connection of its own
  return std::nullopt;
}

bool EtcdClient::moved_on(const boost::system::error_code& code, std::exception_ptr failed,
                          const Endpoint& at, const char* path, bool fresh, Clock::time_point until,
                          CallFailures& failures) {
  const std::size_t members = options_.endpoints.size();
  if (code == http::error::body_limit) {
    // The member answered: too much (a stranger's huge values, or a broken member or proxy
    // announcing an absurd length). That member's failure: the next one is tried; when none
    // answers within the bound, the call ends with this line.
    failures.oversized = fmt::format(
        "etcd member {} answered {} with more than the client's bound of {} MiB per reply",
        at.name(), path, kMaxReplyBytes >> 20);
    failures.last_error = fmt::format("{}: a reply over the client's bound of {} MiB", at.name(),
                                      kMaxReplyBytes >> 20);
    failures.oversized_members[current_ % members] = true;
    if (std::all_of(failures.oversized_members.begin(), failures.oversized_members.end(),
                    [](bool o) { return o; }))
      throw EtcdProtocolError(failures.oversized);  // every member: no use asking again
    return false;
  }
  failures.last_error = fmt::format("{}: {}", at.name(), reason_of(failed));
  if (code == beast::error::timeout && members > 2) {
    // A member that accepts and never answers (a black hole, a SIGSTOPped VM) cost its
    // share: the others are asked at once and the first that answers is tried next, so
    // black holes listed before a healthy member cannot use up the deadline one by one.
    if (auto next = first_answering(current_ % members, until)) {
      current_ = *next;
      return true;
    }
  }
  if (is_tls_error(failed)) failures.tls_error = failures.last_error;
  // A TLS-only member closes a plain connection without an answer.
  if (!tls_ && fresh && is_end_of_stream(failed))
    failures.last_error += "; is the member TLS-only? then name it https:// or give etcd_cacert";
  return false;
}

void EtcdClient::throw_unanswered(CallFailures& failures) const {
  if (!failures.tls_error.empty()) {
    throw EtcdUnavailable(fmt::format("TLS with etcd at {} failed ({})",
                                      describe(options_.endpoints), failures.tls_error));
  }
  if (!failures.oversized.empty()) throw EtcdProtocolError(failures.oversized);
  if (!failures.wrong_cluster.empty() && !failures.etcd_answered) {
    throw EtcdUnavailable(fmt::format(
        "no member of this job's etcd cluster at {} answered within "
        "{:.3g} s; {}",
        describe(options_.endpoints), options_.timeout.count() / 1000.0, failures.wrong_cluster));
  }
  std::string& last_error = failures.last_error;
  for (const auto& line : failures.answered) {
    if (!line.empty() && line != last_error) last_error += "; before: " + line;
  }
  throw EtcdUnavailable(
      fmt::format("etcd at {} did not answer within {:.3g} s ({})", describe(options_.endpoints),
                  options_.timeout.count() / 1000.0, last_error),
      failures.etcd_answered);
}

void EtcdClient::check_one_cluster(std::chrono::milliseconds within) {
  const std::size_t members = options_.endpoints.size();
  if (members < 2) return;
  // Every member at once, one deadline for all: each unreachable member listed used to add its
  // own share (1,000 dead addresses: no end in 120 s).
  const auto deadline = Clock::now() + std::min(options_.timeout, within);
  const auto status =
      probe_members(tls_.get(), options_.endpoints, std::vector<bool>(members, true), deadline,
                    [](const auto&) { return false; });
  std::optional<std::size_t> first;  // in the order listed: the member whose cluster settles
  for (std::size_t i = 0; i < members; ++i) {
    if (!status[i].answered || status[i].cluster_id.empty()) continue;
    if (!first) {
      first = i;
    } else if (status[*first].cluster_id != status[i].cluster_id) {
      throw EtcdProtocolError(fmt::format(
          "etcd members {} (cluster {}) and {} (cluster {}) belong to different etcd clusters: "
          "--rdzv_endpoint must list the members of one cluster",
          options_.endpoints[*first].name(), status[*first].cluster_id,
          options_.endpoints[i].name(), status[i].cluster_id));
    }
  }
  if (first) {
    if (auto other =
            other_cluster(*options_.book, options_.endpoints[*first], status[*first].cluster_id))
      throw EtcdProtocolError(*other);
  }
  // The member that answered first (of the job's cluster) is tried first, by this client and by
  // every later one of the same cluster (the keepalive's, the watch).
  std::optional<std::size_t> quickest;
  for (std::size_t i = 0; i < members; ++i) {
    if (!status[i].answered) continue;
    if (first && !status[i].cluster_id.empty() && status[i].cluster_id != status[*first].cluster_id)
      continue;
    if (!quickest || status[i].order < status[*quickest].order) quickest = i;
  }
  if (quickest) {
    current_ = *quickest;
    options_.book->prefer(*quickest);
  }
}

std::optional<std::size_t> EtcdClient::first_answering(std::size_t skip,
                                                       Clock::time_point deadline) {
  const std::size_t members = options_.endpoints.size();
  std::vector<bool> ask(members, true);
  ask[skip] = false;
  MemberBook& book = *options_.book;
  const auto of_this_cluster = [&](const MemberStatus& s, std::size_t i) {
    return s.answered && !other_cluster(book, options_.endpoints[i], s.cluster_id);
  };
  const auto status =
      probe_members(tls_.get(), options_.endpoints, ask, deadline, [&](const auto& all) {
        for (std::size_t i = 0; i < all.size(); ++i)
          if (of_this_cluster(all[i], i)) return true;
        return false;
      });
  std::optional<std::size_t> quickest;
  for (std::size_t i = 0; i < members; ++i) {
    if (of_this_cluster(status[i], i) && (!quickest || status[i].order < status[*quickest].order))
      quickest = i;
  }
  return quickest;
}

bool EtcdClient::any_member_answers() {
  try {
    (void)post("/v3/maintenance/status", "{}");
    return true;
  } catch (const EtcdRefused&) {
    return true;  // etcd refused: it answered
  } catch (const EtcdUnavailable& e) {
    return e.etcd_answered();
  } catch (const std::exception&) {
    return false;
  }
}

RangeReply EtcdClient::range(const std::string& key, const std::string& range_end, bool keys_only) {
  if (range_end.empty())
    return parse_range(post("/v3/kv/range", range_request(key, {}, 0, 0, keys_only)));
  for (int attempt = 0;; ++attempt) {
    RangeReply all;
    std::string from = key;
    try {
      while (true) {
        RangeReply page =
            parse_range(post("/v3/kv/range", range_request(from, range_end, kRangePageKeys,
                                                           all.revision, keys_only)));
        if (all.revision == 0) all.revision = page.revision;
        if (all.kvs.size() + page.kvs.size() > kMaxRangeKeys) {
          throw EtcdProtocolError(fmt::format(
              "etcd holds more than {} keys under '{}': more than this job writes (a stranger's "
              "keys under the job's prefix?)",
              kMaxRangeKeys, key));
        }
        const bool more = page.more && !page.kvs.empty();
        if (more) from = page.kvs.back().key + '\0';  // the next page starts after the last key
        for (auto& kv : page.kvs) all.kvs.push_back(std::move(kv));
        if (!more) return all;
      }
    } catch (const EtcdRefused& e) {
      // The first page's revision was compacted while the later pages were read: read anew.
      if (e.grpc_code() != kGrpcOutOfRange || attempt >= 3) throw;
    }
  }
}

std::int64_t EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
  return parse_revision(post("/v3/kv/put", put_request(key, value, lease)));
}

std::int64_t EtcdClient::erase(const std::string& key, const std::string& range_end) {
  return parse_revision(post("/v3/kv/deleterange", delete_request(key, range_end)));
}

TxnReply EtcdClient::txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                         const std::vector<Op>& failure) {
  return parse_txn(post("/v3/kv/txn", txn_request(compares, success, failure)));
}

LeaseGrant EtcdClient::grant_lease(std::int64_t ttl_seconds) {
  return parse_lease_grant(post("/v3/lease/grant", lease_grant_request(ttl_seconds)));
}

std::int64_t EtcdClient::keep_alive(std::int64_t lease) {
  return parse_keepalive(post("/v3/lease/keepalive", lease_id_request(lease)));
}

void EtcdClient::revoke_lease(std::int64_t lease) {
  try {
    (void)post("/v3/lease/revoke", lease_id_request(lease));
  } catch (const EtcdRefused& e) {
    // Revoking a lease that already expired is no failure.
    if (e.grpc_code() != kGrpcNotFound) throw;
  }
}

std::vector<WatchEvent> EtcdClient::wait_for_change(const std::string& key,
                                                    const std::string& range_end,
                                                    std::int64_t start_revision,
                                                    std::chrono::milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  std::vector<WatchEvent> events;
  std::string last_error;
  const std::string token = auth_token();
  const std::size_t members = options_.endpoints.size();
  for (std::size_t tries = 0; tries < members && Clock::now() < deadline; ++tries) {
    const Endpoint& at = options_.endpoints[current_ % members];
    MemberStream stream(io_, tls_.get());
    beast::flat_buffer buffer;
    bool timed_out_waiting = false;
    auto call = [&]() -> asio::awaitable<void> {
      stream.tcp().expires_after(
          std::min<Clock::duration>(options_.timeout, deadline - Clock::now()));
      co_await connect(stream, at);
      auto req =
          make_request(at, "/v3/watch", watch_request(key, range_end, start_revision), token);
      req.keep_alive(false);
      co_await stream.with([&](auto& s) { return http::async_write(s, req, use_awaitable); });
      stream.tcp().expires_at(deadline);
      co_await read_watch(stream, buffer, [&](const WatchMessage& m) {
        if (m.compact_revision > 0) {
          events.push_back(WatchEvent{});  // compacted: the caller rereads
          return false;
        }
        if (m.canceled)
          throw EtcdRefused("etcd cancelled the watch: " + m.cancel_reason, kGrpcCancelled);
        if (auto other = other_cluster(*options_.book, at, m.cluster_id))
          throw EtcdUnavailable(*other);
        for (const auto& e : m.events) events.push_back(e);
        return events.empty();
      });
    };
    try {
      run_blocking(io_, call());
      return events;
    } catch (const EtcdRefused& e) {
      if (!grpc_code_is_transient(e.grpc_code())) throw;
      last_error = fmt::format("{}: {}", at.name(), e.what());
    } catch (const boost::system::system_error& e) {
      if (e.code() == beast::error::timeout && Clock::now() >= deadline) timed_out_waiting = true;
      last_error = fmt::format("{}: {}", at.name(), reason_of(std::current_exception()));
    } catch (...) {
      last_error = fmt::format("{}: {}", at.name(), reason_of(std::current_exception()));
    }
    if (timed_out_waiting) return events;  // nothing changed in time
    ++current_;
  }
  if (Clock::now() >= deadline && last_error.empty()) return events;
  throw EtcdUnavailable(fmt::format("etcd at {} did not answer a watch ({})",
                                    describe(options_.endpoints), last_error));
}

namespace {
// Options whose clients share a MemberBook (a watch made without one gets its own).
ClientOptions with_book(ClientOptions options) {
  if (!options.book) options.book = std::make_shared<MemberBook>();
  return options;
}
}  // namespace

EtcdWatch::EtcdWatch(ClientOptions options, std::string key, std::string range_end,
                     std::int64_t start_revision, Timing timing, Callbacks callbacks)
    : options_(with_book(std::move(options))),
      key_(std::move(key)),
      range_end_(std::move(range_end)),
      next_revision_(start_revision),
      timing_(timing),
      callbacks_(std::move(callbacks)),
      tls_(make_tls_context(options_.tls)),
      thread_([this] { run(); }) {}

EtcdWatch::~EtcdWatch() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void EtcdWatch::run() {
  const std::size_t members = options_.endpoints.size();
  current_ = timing_.first_member % members;
  failed_at_.assign(members, std::nullopt);
  // Each member gets a share of the give-up until it says "created" (at most the options'
  // timeout): a member that accepts and never answers (SIGSTOPped, cut off) leaves time for
  // the others, so every member is tried within the give-up.
  const auto share = std::max<std::chrono::milliseconds>(
      std::min<std::chrono::milliseconds>(
          options_.timeout, timing_.give_up / static_cast<int>(std::max<std::size_t>(members, 1))),
      std::chrono::milliseconds(200));
  // When the stream broke (or the watch began): the give-up counts from here, not from the last
  // message, so that a quiet stretch before a member's loss is not counted against the others.
  broken_since_ = Clock::now();
  while (!stopping_) {
    const Endpoint& at = options_.endpoints[current_ % members];
    const std::optional<std::string> token = stream_token();
    if (!token) return;  // etcd refused the user: said
    Served served;
    const bool authenticated = options_.user.empty() || !token->empty();
    if (authenticated && !serve(at, *token, share, served)) return;
    if (stopping_) return;
    if (served.compacted > 0) {
      if (!resume_after_compaction(served.compacted)) return;
      continue;
    }
    if (!move_on(served.created)) return;
  }
}

void EtcdWatch::fail(const std::string& why) {
  if (!stopping_ && callbacks_.on_error) callbacks_.on_error(why);
}

std::optional<std::string> EtcdWatch::stream_token() {
  if (options_.user.empty()) return std::string();
  // A fresh token for each (re)connection: the last may have expired.
  try {
    EtcdClient auth(options_);
    return auth.auth_token();
  } catch (const EtcdUnavailable& e) {
    last_error_ = e.what();  // unreachable now: counted as a failed try
    return std::string();
  } catch (const std::exception& e) {
    fail(e.what());
    return std::nullopt;
  }
}

bool EtcdWatch::serve(const Endpoint& at, const std::string& token, std::chrono::milliseconds share,
                      Served& served) {
  MemberStream stream(io_, tls_.get());
  beast::flat_buffer buffer;
  auto call = [&]() -> asio::awaitable<void> {
    // Until "created", the options' timeout: a member that accepts and never answers is
    // left for the next one.
    stream.tcp().expires_after(share);
    co_await connect(stream, at);
    auto req =
        make_request(at, "/v3/watch", watch_request(key_, range_end_, next_revision_), token);
    req.keep_alive(false);
    co_await stream.with([&](auto& s) { return http::async_write(s, req, use_awaitable); });
    co_await read_watch(stream, buffer, [&](const WatchMessage& m) {
      return on_stream_message(m, at, stream, served);
    });
  };
  try {
    run_blocking(io_, call(), &stopping_);
  } catch (const EtcdRefused& e) {
    if (!grpc_code_is_transient(e.grpc_code())) {
      fail(e.what());
      return false;
    }
    last_error_ = fmt::format("{}: {}", at.name(), e.what());
  } catch (...) {
    std::string reason = reason_of(std::current_exception());
    if (reason == "no answer in time")
      reason = served.created ? fmt::format("the stream was silent for {:.3g} s",
                                            timing_.silence.count() / 1000.0)
                              : "no answer in time";
    last_error_ = fmt::format("{}: {}", at.name(), reason);
  }
  return true;
}

bool EtcdWatch::on_stream_message(const WatchMessage& m, const Endpoint& at, MemberStream& stream,
                                  Served& served) {
  if (m.compact_revision > 0) {
    served.compacted = m.compact_revision;
    return false;
  }
  if (m.canceled) {
    throw EtcdRefused(fmt::format("etcd cancelled the watch on {} ({})", key_, m.cancel_reason),
                      kGrpcCancelled);
  }
  // A member of another etcd cluster (silent at the first join's check) is no member of
  // this job's: its stream is that member's failure.
  if (auto other = other_cluster(*options_.book, at, m.cluster_id)) throw EtcdUnavailable(*other);
  if (m.created) served.created = true;
  // The stream is alive: it answered. Silent for `silence` from now on, it is not.
  if (timing_.silence.count() > 0) {
    stream.tcp().expires_after(timing_.silence);
  } else if (served.created) {
    stream.tcp().expires_never();
  }
  if (!m.events.empty()) {
    next_revision_ = m.events.back().kv.mod_revision + 1;
  } else if (!m.created && m.revision > 0) {
    // A progress notification: every event up to its revision was sent.
    next_revision_ = std::max(next_revision_, m.revision + 1);
  }
  if (!stopping_ && callbacks_.on_message && (!m.events.empty() || m.created))
    callbacks_.on_message(m);
  return !stopping_.load();
}

bool EtcdWatch::resume_after_compaction(std::int64_t compacted) {
  // Not a failure: the owner reads its state now and the watch goes on from there.
  if (!callbacks_.on_compacted) {
    fail(fmt::format("etcd compacted the watch on {} at revision {}", key_, compacted));
    return false;
  }
  try {
    next_revision_ = callbacks_.on_compacted(compacted);
  } catch (const std::exception& e) {
    last_error_ =
        fmt::format("re-reading after etcd's compaction at revision {}: {}", compacted, e.what());
    if (Clock::now() - broken_since_ > timing_.give_up) {
      fail(last_error_);
      return false;
    }
    return true;
  }
  broken_since_ = Clock::now();
  return true;
}

bool EtcdWatch::move_on(bool created) {
  const std::size_t left = current_ % options_.endpoints.size();
  if (created) {
    broken_since_ = Clock::now();  // it served: the give-up counts from now
    failed_at_[left].reset();
  } else {
    failed_at_[left] = Clock::now();
  }
  if (Clock::now() - broken_since_ > timing_.give_up) {
    fail(fmt::format("no member of etcd at {} served the watch for {:.3g} s ({})",
                     describe(options_.endpoints), timing_.give_up.count() / 1000.0, last_error_));
    return false;
  }
  current_ = next_member(left);
  // Every member failed: a short pause before the next round over them.
  if (std::all_of(failed_at_.begin(), failed_at_.end(),
                  [](const auto& f) { return f.has_value(); }))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return true;
}

std::size_t EtcdWatch::next_member(std::size_t left) const {
  // The members that did not fail first (round-robin from the one after `left`), then those
  // that failed, the oldest failure first; `left` itself (silent or broken) last.
  const std::size_t members = options_.endpoints.size();
  std::optional<std::size_t> best;
  for (std::size_t i = 1; i < members; ++i) {
    const std::size_t m = (left + i) % members;
    if (!best) {
      best = m;
    } else if (failed_at_[m] && failed_at_[*best] && *failed_at_[m] < *failed_at_[*best]) {
      best = m;
    } else if (!failed_at_[m] && failed_at_[*best]) {
      best = m;
    }
  }
  return best.value_or(left);
}

std::unique_ptr<EtcdGateway> ClientCluster::connect(std::chrono::milliseconds timeout) {
  ClientOptions options = options_;
  options.timeout = timeout;
  return std::make_unique<EtcdClient>(std::move(options));
}

std::unique_ptr<EtcdWatchStream> ClientCluster::watch(std::string key, std::string range_end,
                                                      std::int64_t start_revision,
                                                      WatchTiming timing,
                                                      WatchCallbacks callbacks) {
  return std::make_unique<EtcdWatch>(options_, std::move(key), std::move(range_end), start_revision,
                                     timing, std::move(callbacks));
}

}  // namespace ddp::rdzv::etcd
