#include "rendezvous/store_session.hpp"

#include <fmt/format.h>

#include "rendezvous/log.hpp"

namespace ddp::rdzv {

namespace {
constexpr std::size_t kMaxReadsPerWakeup = 8;      // fairness between busy connections
constexpr std::size_t kKeepCapacityBytes = 64 * 1024;  // idle connections give back larger buffers
constexpr std::size_t kSmallInputBytes = 64 * 1024;    // never closed for the global budget below this
constexpr std::size_t kLargeReadBytes = 4096;          // read buffer of connections with large requests

void release_if_large(std::string& buffer) {
  if (buffer.empty() && buffer.capacity() > kKeepCapacityBytes) std::string().swap(buffer);
}
}  // namespace

StoreSession::StoreSession(boost::asio::ip::tcp::socket socket, ClientId id,
                           std::shared_ptr<SessionHost> host)
    : socket_(std::move(socket)), id_(id), host_(std::move(host)) {}

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
  return out_.size() - out_off_ > host_->limits().max_pending_output_bytes;
}

void StoreSession::arm_read() {
  if (closed_ || read_armed_ || output_backlogged()) return;
  read_armed_ = true;
  read_into_large_ = large_read_ != nullptr;
  const auto landing = read_into_large_ ? boost::asio::buffer(large_read_.get(), kLargeReadBytes)
                                        : boost::asio::buffer(first_bytes_);
  // A read (not a bare readiness wait): Asio then keeps the edge-triggered epoll registration
  // as it is, where a wait would cost an epoll_ctl per request.
  socket_.async_read_some(landing,
                          [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                            self->on_read(ec, n);
                          });
}

void StoreSession::on_read(const boost::system::error_code& ec, std::size_t n) {
  read_armed_ = false;
  if (closed_) return;
  const char* landing = read_into_large_ ? large_read_.get() : first_bytes_.data();
  const std::size_t landing_size = read_into_large_ ? kLargeReadBytes : first_bytes_.size();
  in_.append(landing, n);
  bool peer_done = static_cast<bool>(ec);  // EOF or reset: still apply what arrived before it
  if (!peer_done && n == landing_size) {
    if (!large_read_) large_read_ = std::make_unique<char[]>(kLargeReadBytes);
    // More may be waiting: drain it through the shared scratch buffer.
    std::string& scratch = host_->scratch_buffer();
    for (std::size_t i = 0; i < kMaxReadsPerWakeup; ++i) {
      boost::system::error_code read_ec;
      const std::size_t got = socket_.read_some(boost::asio::buffer(scratch), read_ec);
      if (read_ec == boost::asio::error::would_block || read_ec == boost::asio::error::try_again) break;
      if (read_ec) {
        peer_done = true;
        break;
      }
      in_.append(scratch.data(), got);
      if (got < scratch.size()) break;
    }
  }
  if (!account_input()) {
    close_for_error(fmt::format("server-wide input buffer limit of {} bytes reached", host_->limits().max_total_input_bytes));
    return;
  }
  process_input();
  if (peer_done) {
    finish(false);
    return;
  }
  arm_read();
}

bool StoreSession::account_input() {
  const auto delta = static_cast<std::ptrdiff_t>(in_.size()) - static_cast<std::ptrdiff_t>(accounted_input_);
  accounted_input_ = in_.size();
  const std::size_t total = host_->note_input_bytes(delta);
  return total <= host_->limits().max_total_input_bytes || in_.size() - in_pos_ <= kSmallInputBytes;
}

void StoreSession::process_input() {
  // Replies to every complete request in this read are collected in out_ and written with one
  // send at the end: a client that pipelines requests costs one system call (and one TCP
  // segment) per read, not one per reply.
  batching_replies_ = true;
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
    host_->handle(*this, gen, std::move(result.command), first);
  }
  batching_replies_ = false;
  flush();
  if (in_pos_ == in_.size()) {
    in_.clear();
    in_pos_ = 0;
    release_if_large(in_);
  } else if (in_pos_ > in_.size() / 2) {
    in_.erase(0, in_pos_);
    in_pos_ = 0;
  }
  account_input();  // only shrinks here
}

void StoreSession::send(std::string_view bytes) {
  if (closed_ || bytes.empty()) return;
  out_.append(bytes);
  if (!batching_replies_) flush();
}

void StoreSession::flush() {
  if (closed_ || batching_replies_ || write_in_flight_ || out_off_ == out_.size()) return;
  // Write straight away on the non-blocking socket: almost every reply fits in the socket
  // buffer, and skipping an async operation per reply is most of the server's per-request cost.
  boost::system::error_code ec;
  const std::size_t n = socket_.write_some(boost::asio::buffer(out_.data() + out_off_, out_.size() - out_off_), ec);
  if (ec && ec != boost::asio::error::would_block && ec != boost::asio::error::try_again) {
    finish(false);
    return;
  }
  out_off_ += n;
  if (out_off_ == out_.size()) {
    out_.clear();
    out_off_ = 0;
    release_if_large(out_);
    return;
  }
  if (out_off_ > out_.size() / 2) {  // keep the unsent tail at the front without quadratic copying
    out_.erase(0, out_off_);
    out_off_ = 0;
  }
  // The peer is slow to read: wait until the socket is writable again.
  write_in_flight_ = true;
  socket_.async_wait(boost::asio::ip::tcp::socket::wait_write,
                     [self = shared_from_this()](const boost::system::error_code& wait_ec) { self->on_writable(wait_ec); });
}

void StoreSession::on_writable(const boost::system::error_code& ec) {
  write_in_flight_ = false;
  if (closed_) return;
  if (ec) {
    finish(false);
    return;
  }
  flush();
  if (!output_backlogged()) {
    process_input();  // requests held back while the peer was not reading
    arm_read();
  }
}

void StoreSession::close() { finish(false); }

void StoreSession::close_for_error(std::string_view reason) {
  if (closed_) return;
  batching_replies_ = false;
  flush();  // earlier requests of the same read keep their replies, as if each had been sent at once
  if (closed_) return;
  const char* gen = kind_ == ConnectionKind::G1 ? "G1" : kind_ == ConnectionKind::G2 ? "G2" : "unclassified";
  // The peer is looked up only here: a getpeername per connection is measurable at 16k clients.
  host_->log_closed_for_error(fmt::format("closing connection from {} ({}): {}", describe_peer(), gen, reason));
  finish(true);
}

void StoreSession::finish(bool for_error) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  in_.clear();
  account_input();
  out_.clear();
  host_->session_closed(id_, for_error);
}

}  // namespace ddp::rdzv
