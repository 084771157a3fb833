#include "rendezvous/store_follower.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/log.hpp"

namespace ddp::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// The subscription's replies must come within this time: a primary that accepts but never
// answers (paused, wedged) must not hold the standby's start-up forever.
constexpr int kSubscribeTimeoutMs = 30000;

// Reads exactly `n` bytes from a blocking socket, giving up after kSubscribeTimeoutMs in total.
std::string read_exact(int fd, std::size_t n) {
  std::string out(n, '\0');
  std::size_t have = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kSubscribeTimeoutMs);
  while (have < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw std::runtime_error("the primary did not answer the subscription within 30 s");
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw std::runtime_error(std::strerror(errno));
    if (ready == 0) continue;
    const ssize_t got = ::recv(fd, out.data() + have, n - have, 0);
    if (got == 0)
      throw std::runtime_error(
          "the primary closed the subscription (is it a primary ddprun-store?)");
    if (got < 0 && errno != EINTR && errno != EAGAIN)
      throw std::runtime_error(std::strerror(errno));
    if (got > 0) have += static_cast<std::size_t>(got);
  }
  return out;
}

}  // namespace

StoreFollower::StoreFollower(asio::io_context& io, std::string primary, const StoreLimits& limits,
                             Apply apply)
    : socket_(io), primary_(std::move(primary)), parser_(limits), apply_(std::move(apply)) {}

void StoreFollower::connect() {
  const auto colon = primary_.rfind(':');
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(fmt::format("cannot follow {}: {}", primary_, why));
  };
  if (colon == std::string::npos || colon == 0) fail("expected HOST:PORT");
  const std::string host = primary_.substr(0, colon), port = primary_.substr(colon + 1);
  boost::system::error_code ec;
  tcp::resolver resolver(socket_.get_executor());
  auto endpoints = resolver.resolve(host, port, ec);
  if (ec) fail(ec.message());
  asio::connect(socket_, endpoints, ec);
  if (ec) fail(ec.message());
  socket_.set_option(tcp::no_delay(true), ec);
  const std::string hello =
      encode_request(Generation::G2, Command{Op::Validate, {}, {}, 0, kValidateMagic}) +
      encode_request(Generation::G2, Command{Op::Ping, {}, {}, 0, 0x5eedu}) +
      encode_request(Generation::G2, Command{Op::Get, {std::string(kFollowKey)}, {}, 0, 0});
  asio::write(socket_, asio::buffer(hello), ec);
  if (ec) fail(ec.message());
  std::string epoch;
  try {
    const std::string head =
        read_exact(socket_.native_handle(), 12);  // PING echo (4) + epoch length (8)
    const std::uint64_t len = get_u64(head.data() + 4);
    if (len == 0 || len > 32) fail("bad subscription reply");
    epoch = read_exact(socket_.native_handle(), len);
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  const auto parsed = parse_epoch(epoch);
  if (!parsed) fail("bad epoch in the subscription reply");
  primary_epoch_ = *parsed;
  following_ = true;
  log_line(fmt::format("standby: following {} (epoch {})", primary_, primary_epoch_));
}

void StoreFollower::start() { read_more(); }

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
        self->read_more();
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
      last_sequence_ = frame->sequence;
      apply_(std::move(frame->mutation));
    }
  } catch (const std::runtime_error& e) {
    lost(e.what());
    return false;
  }
  return true;
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
    const std::string fence = encode_request(
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
