#include "rendezvous/store_follower.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <stdexcept>

#include <fmt/format.h>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/log.hpp"
#include "rendezvous/store_errors.hpp"

namespace ddp::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// The subscription (connect, handshake, token, epoch) must be done within this time: a primary
// that accepts but never answers (paused, wedged) must not hold the standby's start-up forever.
constexpr auto kSubscribeTimeout = std::chrono::seconds(30);
constexpr std::uint32_t kPingNonce = 0x5eedu;
constexpr std::size_t kMaxEpochBytes = 32;

}  // namespace

StoreFollower::StoreFollower(asio::io_context& io, std::string primary, const StoreLimits& limits,
                             AfterConnect after_connect, Apply apply)
    : socket_(io),
      primary_(std::move(primary)),
      after_connect_(std::move(after_connect)),
      parser_(limits),
      apply_(std::move(apply)) {}

void StoreFollower::connect() {
  const auto colon = primary_.rfind(':');
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(fmt::format("cannot follow {}: {}", primary_, why));
  };
  if (colon == std::string::npos || colon == 0) fail("expected HOST:PORT");
  std::string host = primary_.substr(0, colon);
  const std::string port_text = primary_.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const auto [end, parse_ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (parse_ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535)
    fail("expected HOST:PORT");

  const auto deadline = BlockingSocket::Clock::now() + kSubscribeTimeout;
  BlockingSocket link;
  std::string epoch;
  const char* stage = "the connection";
  bool subscribing = false;
  try {
    link = BlockingSocket::connect(host, static_cast<std::uint16_t>(port), deadline);
    stage = "the handshake";
    link.send_all(encode_request(Generation::G2, Command{Op::Validate, {}, {}, 0, kValidateMagic}) +
                      encode_request(Generation::G2, Command{Op::Ping, {}, {}, 0, kPingNonce}),
                  deadline);
    if (link.recv_u32(deadline) != kPingNonce)
      fail("the primary answered PING wrongly (is it a ddprun-store?)");
    // The job's token, when this standby has one: a primary with a token closes a subscription
    // that did not prove it (the replication keys are protected like the rendezvous keys).
    if (after_connect_) after_connect_(link, deadline);
    stage = "the subscription";
    subscribing = true;
    link.send_all(
        encode_request(Generation::G2, Command{Op::Get, {std::string(kFollowKey)}, {}, 0, 0}),
        deadline);
    epoch = link.recv_bytes(deadline, kMaxEpochBytes);
  } catch (const StoreAuthError& e) {
    fail(e.what());  // the token refused, or a primary without one: never retried
  } catch (const StoreTimeoutError&) {
    fail(
        fmt::format("the primary did not answer {} within {} s", stage, kSubscribeTimeout.count()));
  } catch (const StoreError& e) {
    if (!subscribing) fail(e.what());
    if (!after_connect_) {
      fail(fmt::format(
          "the primary refused the subscription ({}): it is a standby itself, not a ddprun-store, "
          "or it has the job's token and this standby has none (set DDPRUN_RDZV_TOKEN)",
          e.what()));
    }
    fail(fmt::format("the primary refused the subscription ({}); is it a primary ddprun-store?",
                     e.what()));
  }
  const auto parsed = parse_epoch(epoch);
  if (!parsed) fail("bad epoch in the subscription reply");

  // The subscribed connection lives on in Asio from here (frames, drain, fence).
  sockaddr_storage local{};
  socklen_t local_len = sizeof local;
  const int fd = link.release();
  const bool v6 = ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0 &&
                  local.ss_family == AF_INET6;
  boost::system::error_code ec;
  socket_.assign(v6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    fail(ec.message());
  }
  primary_epoch_ = *parsed;
  following_ = true;
  log_line(fmt::format("standby: following {} (epoch {})", primary_, primary_epoch_));
}

void StoreFollower::start() {
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);  // acknowledgements are written without waiting
  read_more();
}

void StoreFollower::read_more() {
  socket_.async_read_some(
      asio::buffer(buf_),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (!self->following_) return;
        if (ec) {
          self->lost(ec == asio::error::eof ? "the primary closed the connection" : ec.message());
          return;
        }
        self->parser_.append(std::string_view(self->buf_, n));
        if (!self->apply_buffered()) return;
        self->acknowledge();
        if (self->following_) self->read_more();
      });
}

bool StoreFollower::apply_buffered() {
  try {
    while (auto frame = parser_.next()) {
      // The first frame sets the base (a follower may subscribe mid-stream); then no gaps.
      if (last_sequence_ != 0 && frame->sequence != last_sequence_ + 1) {
        lost(fmt::format("sequence gap: expected {}, got {}", last_sequence_ + 1, frame->sequence));
        return false;
      }
      const Command& mutation = frame->mutation;
      if (mutation.op == Op::Set && mutation.keys.size() == 1 && mutation.keys[0] == kDroppedKey) {
        dropped_because_ = mutation.values.empty() ? "no reason given" : mutation.values[0];
        if (dropped_because_.empty()) dropped_because_ = "no reason given";
        lost(
            fmt::format("the primary dropped this standby: {}; it is no longer current and "
                        "refuses promotion",
                        dropped_because_));
        return false;
      }
      last_sequence_ = frame->sequence;
      apply_(std::move(frame->mutation));
    }
  } catch (const std::runtime_error& e) {
    lost(e.what());
    return false;
  }
  return true;
}

void StoreFollower::acknowledge() {
  if (!following_ || last_sequence_ == acknowledged_ || out_off_ < out_.size()) return;
  out_ = encode_acknowledgement(last_sequence_);
  out_off_ = 0;
  acknowledged_ = last_sequence_;
  write_pending();
}

void StoreFollower::write_pending() {
  boost::system::error_code ec;
  out_off_ += socket_.write_some(asio::buffer(out_.data() + out_off_, out_.size() - out_off_), ec);
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
    lost(fmt::format("cannot acknowledge: {}", ec.message()));
    return;
  }
  if (out_off_ < out_.size()) {
    socket_.async_wait(tcp::socket::wait_write,
                       [self = shared_from_this()](const boost::system::error_code& wait_ec) {
                         if (!self->following_ || wait_ec) return;  // the reader reports errors
                         self->write_pending();
                       });
    return;
  }
  out_.clear();
  out_off_ = 0;
  acknowledge();  // frames applied while this one was waiting
}

void StoreFollower::drain() {
  if (!following_) return;
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  while (following_) {
    const std::size_t n = socket_.read_some(asio::buffer(buf_), ec);
    if (ec) break;  // would block (all read), or EOF/error: the async reader reports it
    parser_.append(std::string_view(buf_, n));
    if (!apply_buffered()) return;
  }
}

void StoreFollower::lost(const std::string& why) {
  following_ = false;
  boost::system::error_code ignored;
  socket_.close(ignored);
  log_line(fmt::format(
      "standby: stopped following {} after sequence {} ({}); keeping this state until promoted",
      primary_, last_sequence_, why));
}

void StoreFollower::fence(std::int64_t epoch) {
  if (following_) {
    // Best effort and bounded: a non-blocking write into the socket's buffer; a primary that is
    // alive (or paused) reads it when it runs again, one whose host is gone never will.
    // After the rest of a partly written acknowledgement, so the primary parses whole requests.
    std::string fence = out_.substr(out_off_);
    fence += encode_request(
        Generation::G2, Command{Op::Set, {std::string(kFenceKey)}, {std::to_string(epoch)}, 0, 0});
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    socket_.write_some(asio::buffer(fence), ec);
  }
  stop();
}

void StoreFollower::stop() {
  following_ = false;
  boost::system::error_code ignored;
  socket_.close(ignored);
}

}  // namespace ddp::rdzv
