#include "rendezvous/store_follower.hpp"

#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "rendezvous/log.hpp"

namespace ddp::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;

StoreFollower::StoreFollower(asio::io_context& io, std::string primary, const StoreLimits& limits, Apply apply)
    : socket_(io), primary_(std::move(primary)), parser_(limits), apply_(std::move(apply)) {}

void StoreFollower::connect() {
  const auto colon = primary_.rfind(':');
  auto fail = [&](const std::string& why) { throw std::runtime_error(fmt::format("cannot follow {}: {}", primary_, why)); };
  if (colon == std::string::npos || colon == 0) fail("expected HOST:PORT");
  const std::string host = primary_.substr(0, colon), port = primary_.substr(colon + 1);
  boost::system::error_code ec;
  tcp::resolver resolver(socket_.get_executor());
  auto endpoints = resolver.resolve(host, port, ec);
  if (ec) fail(ec.message());
  asio::connect(socket_, endpoints, ec);
  if (ec) fail(ec.message());
  socket_.set_option(tcp::no_delay(true), ec);
  const std::string hello = encode_request(Generation::G2, Command{Op::Validate, {}, {}, 0, kValidateMagic}) +
                            encode_request(Generation::G2, Command{Op::Ping, {}, {}, 0, 0x5eedu}) +
                            encode_request(Generation::G2, Command{Op::Get, {std::string(kFollowKey)}, {}, 0, 0});
  asio::write(socket_, asio::buffer(hello), ec);
  if (ec) fail(ec.message());
  char head[12];
  asio::read(socket_, asio::buffer(head, sizeof head), ec);  // PING echo (4) + epoch length (8)
  if (ec) fail(ec == asio::error::eof ? "the primary closed the subscription (is it a primary ddprun-store?)" : ec.message());
  const std::uint64_t len = get_u64(head + 4);
  if (len == 0 || len > 32) fail("bad subscription reply");
  std::string epoch(len, '\0');
  asio::read(socket_, asio::buffer(epoch), ec);
  if (ec) fail(ec.message());
  const auto parsed = parse_epoch(epoch);
  if (!parsed) fail("bad epoch in the subscription reply");
  primary_epoch_ = *parsed;
  following_ = true;
  log_line(fmt::format("standby: following {} (epoch {})", primary_, primary_epoch_));
}

void StoreFollower::start() { read_more(); }

void StoreFollower::read_more() {
  socket_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                          std::size_t n) {
    if (!self->following_) return;
    if (ec) {
      self->lost(ec == asio::error::eof ? "the primary closed the connection" : ec.message());
      return;
    }
    self->parser_.append(std::string_view(self->buf_, n));
    try {
      while (auto frame = self->parser_.next()) {
        // The first frame sets the base (a follower may subscribe mid-stream); then no gaps.
        if (self->last_sequence_ != 0 && frame->sequence != self->last_sequence_ + 1) {
          self->lost(fmt::format("sequence gap: expected {}, got {}", self->last_sequence_ + 1, frame->sequence));
          return;
        }
        self->last_sequence_ = frame->sequence;
        self->apply_(std::move(frame->mutation));
      }
    } catch (const std::runtime_error& e) {
      self->lost(e.what());
      return;
    }
    self->read_more();
  });
}

void StoreFollower::lost(const std::string& why) {
  following_ = false;
  boost::system::error_code ignored;
  socket_.close(ignored);
  log_line(fmt::format("standby: stopped following {} after sequence {} ({}); keeping this state until promoted",
                       primary_, last_sequence_, why));
}

void StoreFollower::fence(std::int64_t epoch) {
  if (following_) {
    // Best effort and bounded: a non-blocking write into the socket's buffer; a primary that is
    // alive (or paused) reads it when it runs again, one whose host is gone never will.
    const std::string fence =
        encode_request(Generation::G2, Command{Op::Set, {std::string(kFenceKey)}, {std::to_string(epoch)}, 0, 0});
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
