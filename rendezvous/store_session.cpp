#include "rendezvous/store_session.hpp"

#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "rendezvous/log.hpp"

namespace ddp::rdzv {

namespace {
constexpr std::size_t kMaxReadsPerWakeup = 8;      // fairness between busy connections
constexpr std::size_t kKeepCapacityBytes = 64 * 1024;  // idle connections give back larger buffers

void release_if_large(std::string& buffer) {
  if (buffer.empty() && buffer.capacity() > kKeepCapacityBytes) std::string().swap(buffer);
}
}  // namespace

StoreSession::StoreSession(boost::asio::ip::tcp::socket socket, ClientId id,
                           std::shared_ptr<SessionHost> host)
    : socket_(std::move(socket)), id_(id), host_(std::move(host)), peer_(describe_peer()) {}

std::string StoreSession::describe_peer() const {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (ec) return "unknown peer";
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

void StoreSession::start() {
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  if (ec) {
    finish(false);
    return;
  }
  arm_read();
}

bool StoreSession::output_backlogged() const {
  return out_.size() + writing_.size() > host_->limits().max_pending_output_bytes;
}

void StoreSession::arm_read() {
  if (closed_ || read_armed_ || output_backlogged()) return;
  read_armed_ = true;
  socket_.async_wait(boost::asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) { self->on_readable(ec); });
}

void StoreSession::on_readable(const boost::system::error_code& ec) {
  read_armed_ = false;
  if (closed_) return;
  if (ec) {
    finish(false);
    return;
  }
  std::string& scratch = host_->scratch_buffer();
  bool peer_done = false;
  for (std::size_t i = 0; i < kMaxReadsPerWakeup; ++i) {
    boost::system::error_code read_ec;
    const std::size_t n = socket_.read_some(boost::asio::buffer(scratch), read_ec);
    if (read_ec == boost::asio::error::would_block || read_ec == boost::asio::error::try_again) break;
    if (read_ec) {
      peer_done = true;  // EOF or reset: still apply what arrived before it (a SET then exit)
      break;
    }
    in_.append(scratch.data(), n);
    if (n < scratch.size()) break;
  }
  process_input();
  if (peer_done) {
    finish(false);
    return;
  }
  arm_read();
}

void StoreSession::process_input() {
  while (!closed_ && !output_backlogged()) {
    const std::string_view avail(in_.data() + in_pos_, in_.size() - in_pos_);
    if (avail.empty() || avail.size() < need_total_) break;
    if (kind_ == ConnectionKind::Undetermined) {
      kind_ = classify_connection(avail);
      if (kind_ == ConnectionKind::Undetermined) {
        need_total_ = 5;  // 00 seen: VALIDATE (G2) or a G1 SET, decided by the next four bytes
        break;
      }
    }
    const Generation gen = kind_ == ConnectionKind::G1 ? Generation::G1 : Generation::G2;
    DecodeResult result = decode_request(avail, gen, host_->limits());
    if (result.status == DecodeStatus::NeedMore) {
      need_total_ = result.need_total;
      break;
    }
    if (result.status == DecodeStatus::Bad) {
      close_for_error(result.error);
      return;
    }
    in_pos_ += result.consumed;
    need_total_ = 0;
    const bool first = first_request_;
    first_request_ = false;
    host_->handle(*this, gen, result.command, first);
  }
  if (in_pos_ == in_.size()) {
    in_.clear();
    in_pos_ = 0;
    release_if_large(in_);
  } else if (in_pos_ > in_.size() / 2) {
    in_.erase(0, in_pos_);
    in_pos_ = 0;
  }
}

void StoreSession::send(std::string_view bytes) {
  if (closed_ || bytes.empty()) return;
  out_.append(bytes);
  flush();
}

void StoreSession::flush() {
  if (closed_ || write_in_flight_ || out_.empty()) return;
  writing_.swap(out_);
  write_in_flight_ = true;
  boost::asio::async_write(socket_, boost::asio::buffer(writing_),
                           [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                             self->on_written(ec);
                           });
}

void StoreSession::on_written(const boost::system::error_code& ec) {
  write_in_flight_ = false;
  if (closed_) return;
  if (ec) {
    finish(false);
    return;
  }
  writing_.clear();
  release_if_large(writing_);
  flush();
  if (!output_backlogged()) {
    process_input();  // requests held back while the peer was not reading
    arm_read();
  }
}

void StoreSession::close() { finish(false); }

void StoreSession::close_for_error(std::string_view reason) {
  if (closed_) return;
  const char* gen = kind_ == ConnectionKind::G1 ? "G1" : kind_ == ConnectionKind::G2 ? "G2" : "unclassified";
  log_line(fmt::format("closing connection from {} ({}): {}", peer_, gen, reason));
  finish(true);
}

void StoreSession::finish(bool for_error) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  in_.clear();
  out_.clear();
  host_->session_closed(id_, for_error);
}

}  // namespace ddp::rdzv
