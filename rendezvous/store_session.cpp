#include "rendezvous/store_session.hpp"

#include <new>

#include <fmt/format.h>

namespace ddp::rdzv {

namespace {
constexpr std::size_t kMaxReadsPerWakeup = 8;  // fairness between busy connections
// Idle connections give back larger buffers.
constexpr std::size_t kKeepCapacityBytes = std::size_t{64} * 1024;
constexpr std::size_t kLargeReadBytes = 4096;  // read buffer of connections with large requests

void release_if_large(std::string& buffer) {
  if (buffer.empty() && buffer.capacity() > kKeepCapacityBytes) std::string().swap(buffer);
}
}  // namespace

StoreSession::StoreSession(boost::asio::ip::tcp::socket socket, ClientId id,
                           std::shared_ptr<SessionHost> host)
    : socket_(std::move(socket)), id_(id), host_(std::move(host)), limits_(host_->limits()) {}

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
  last_progress_tick_ = host_->progress_tick();
  arm_read();
}

bool StoreSession::awaiting_progress() const {
  return !closed_ &&
         ((decoder_ && decoder_->mid_request()) || !in_.empty() || pending_output_bytes() > 0);
}

bool StoreSession::output_backlogged() const {
  return pending_output_bytes() > limits_.max_pending_output_bytes;
}

void StoreSession::arm_read() {
  if (closed_ || read_armed_ || output_backlogged()) return;
  read_armed_ = true;
  read_into_large_ = large_read_ != nullptr;
  const auto landing = read_into_large_ ? boost::asio::buffer(large_read_.get(), kLargeReadBytes)
                                        : boost::asio::buffer(first_bytes_);
  // A read (not a bare readiness wait): Asio then keeps the edge-triggered epoll registration
  // as it is, where a wait would cost an epoll_ctl per request.
  socket_.async_read_some(
      landing, [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        self->on_read(ec, n);
      });
}

// The session boundary: nothing thrown while serving this connection reaches the event loop.
// Only allocation failures are expected here (every size is bounded, but the machine may still
// run out); they end this connection, the server keeps serving the others.
void StoreSession::on_read(const boost::system::error_code& ec, std::size_t n) {
  read_armed_ = false;
  if (closed_) return;
  try {
    read_and_process(ec, n);
  } catch (const std::bad_alloc&) {
    fail_out_of_memory();
  } catch (const std::length_error&) {
    fail_out_of_memory();
  }
}

void StoreSession::fail_out_of_memory() {
  batching_replies_ = false;
  try {
    close_for_error("out of memory while serving this connection");
  } catch (const std::bad_alloc&) {
    finish(true);  // not even the log line fits: close quietly
  }
}

void StoreSession::read_and_process(const boost::system::error_code& ec, std::size_t n) {
  const char* landing = read_into_large_ ? large_read_.get() : first_bytes_.data();
  const std::size_t landing_size = read_into_large_ ? kLargeReadBytes : first_bytes_.size();
  if (n > 0) last_progress_tick_ = host_->progress_tick();
  bool peer_done = static_cast<bool>(ec);  // EOF or reset: still apply what arrived before it
  // Replies to every complete request in this read are collected in out_ and written with one
  // send at the end: a client that pipelines requests costs one system call (and one TCP
  // segment) per read, not one per reply.
  batching_replies_ = true;
  on_bytes(std::string_view(landing, n));
  if (!peer_done && n == landing_size && !closed_) {
    if (!large_read_) large_read_ = std::make_unique<char[]>(kLargeReadBytes);
    // More may be waiting: drain it through the shared scratch buffer.
    std::string& scratch = host_->scratch_buffer();
    for (std::size_t i = 0; i < kMaxReadsPerWakeup && !closed_ && !output_backlogged(); ++i) {
      boost::system::error_code read_ec;
      const std::size_t got = socket_.read_some(boost::asio::buffer(scratch), read_ec);
      if (read_ec == boost::asio::error::would_block || read_ec == boost::asio::error::try_again)
        break;
      if (read_ec) {
        peer_done = true;
        break;
      }
      on_bytes(std::string_view(scratch.data(), got));
      if (got < scratch.size()) break;
    }
  }
  batching_replies_ = false;
  flush();
  if (closed_) return;
  account_input();
  if (closed_) return;
  if (peer_done) {
    finish(false);
    return;
  }
  resume_reading();  // what the output bound held back in this read, then read again
}

void StoreSession::on_bytes(std::string_view data) {
  if (closed_) return;
  if (kind_ == ConnectionKind::Undetermined || !in_.empty()) {
    in_.append(data);
    process_held_input();
    return;
  }
  const std::size_t used = decode(data);
  if (!closed_ && used < data.size()) in_.append(data.substr(used));
}

void StoreSession::process_held_input() {
  if (closed_ || in_.empty()) return;
  if (kind_ == ConnectionKind::Undetermined) {
    kind_ = classify_connection(in_);
    if (kind_ == ConnectionKind::Undetermined)
      return;  // 00 seen: VALIDATE (G2) or a G1 SET, decided by 4 more bytes
    decoder_.emplace(kind_ == ConnectionKind::G1 ? Generation::G1 : Generation::G2, limits_);
  }
  const std::size_t used = decode(in_);
  if (closed_) return;
  if (used == in_.size()) {
    in_.clear();
    release_if_large(in_);
  } else {
    in_.erase(0, used);
  }
}

std::size_t StoreSession::decode(std::string_view data) {
  const Generation gen = kind_ == ConnectionKind::G1 ? Generation::G1 : Generation::G2;
  std::size_t pos = 0;
  while (pos < data.size() && !closed_ && !output_backlogged()) {
    const RequestDecoder::Step step = decoder_->feed(data.substr(pos));
    pos += step.consumed;
    if (step.status == DecodeStatus::NeedMore) break;
    if (step.status == DecodeStatus::Bad) {
      close_for_error(decoder_->error());
      break;
    }
    const bool first = first_request_;
    first_request_ = false;
    host_->handle(*this, gen, decoder_->take(), first);
  }
  return pos;
}

void StoreSession::send(std::string_view bytes, Message kind) {
  if (closed_ || bytes.empty()) return;
  // A tagged connection is a node's proxy: its replies are already held to the bound by reading
  // no more requests while it is past it, and the proxy bounds each of its workers on its own
  // side. A notification for it may go past the bound by one reply more (the most a reply
  // accepted under the bound can add): closing the link would close every worker of the node for
  // one worker's large reads (docs/scale.md, "Store proxy bounds").
  const std::size_t cap =
      limits_.max_pending_output_bytes +
      (tagged_ && kind == Message::Event ? limits_.max_reply_bytes : std::size_t{0});
  if (pending_output_bytes() > cap) {
    close_for_error(
        fmt::format("owed more than {} bytes of replies and notifications it does not read", cap));
    return;
  }
  try {
    if (tagged_) out_.push_back(static_cast<char>(kind == Message::Reply ? kTagReply : kTagEvent));
    out_.append(bytes);
  } catch (const std::bad_alloc&) {
    fail_out_of_memory();
    return;
  }
  if (!batching_replies_) flush();
}

void StoreSession::flush() {
  if (closed_ || batching_replies_ || write_in_flight_) return;
  if (out_off_ == out_.size()) {
    account_output();
    return;
  }
  // Write straight away on the non-blocking socket: almost every reply fits in the socket
  // buffer, and skipping an async operation per reply is most of the server's per-request cost.
  boost::system::error_code ec;
  const std::size_t n =
      socket_.write_some(boost::asio::buffer(out_.data() + out_off_, out_.size() - out_off_), ec);
  if (ec && ec != boost::asio::error::would_block && ec != boost::asio::error::try_again) {
    finish(false);
    return;
  }
  out_off_ += n;
  if (out_off_ == out_.size()) {
    out_.clear();
    out_off_ = 0;
    release_if_large(out_);
    account_output();
    return;
  }
  if (out_off_ > out_.size() / 2) {  // keep the unsent tail at the front without quadratic copying
    out_.erase(0, out_off_);
    out_off_ = 0;
  }
  // The peer is slow to read: wait until the socket is writable again. Owing output starts the
  // --idle-timeout clock even if the connection had been quiet for long.
  if (n > 0 || accounted_output_ == 0) last_progress_tick_ = host_->progress_tick();
  write_in_flight_ = true;
  socket_.async_wait(boost::asio::ip::tcp::socket::wait_write,
                     [self = shared_from_this()](const boost::system::error_code& wait_ec) {
                       self->on_writable(wait_ec);
                     });
  account_output();  // last: the host may close this connection for the server-wide total
}

void StoreSession::on_writable(const boost::system::error_code& ec) {
  write_in_flight_ = false;
  if (closed_) return;
  if (ec) {
    finish(false);
    return;
  }
  try {
    flush();
    resume_reading();
  } catch (const std::bad_alloc&) {
    fail_out_of_memory();
  } catch (const std::length_error&) {
    fail_out_of_memory();
  }
}

void StoreSession::resume_reading() {
  // Requests held back while the peer was not reading, in batches: a batch stops at the output
  // bound, and when the socket takes all of it at once nothing else would wake this connection
  // for the rest (no bytes arrive: they are already here).
  while (!closed_ && !output_backlogged() && !in_.empty()) {
    const std::size_t before = in_.size();
    batching_replies_ = true;
    process_held_input();
    batching_replies_ = false;
    flush();
    if (in_.size() == before) break;  // the rest is an unfinished request: read more
  }
  if (closed_) return;
  account_input();
  arm_read();
}

void StoreSession::account_input() {
  const std::size_t now = closed_ ? 0 : in_.size() + (decoder_ ? decoder_->held_bytes() : 0);
  if (now == accounted_input_) return;
  const auto delta =
      static_cast<std::ptrdiff_t>(now) - static_cast<std::ptrdiff_t>(accounted_input_);
  accounted_input_ = now;
  host_->input_bytes_changed(*this, delta);
}

void StoreSession::account_output() {
  const std::size_t now = closed_ ? 0 : pending_output_bytes();
  if (now == accounted_output_) return;
  const auto delta =
      static_cast<std::ptrdiff_t>(now) - static_cast<std::ptrdiff_t>(accounted_output_);
  accounted_output_ = now;
  host_->output_bytes_changed(*this, delta);
}

void StoreSession::close() { finish(false); }

void StoreSession::close_for_error(std::string_view reason) {
  if (closed_) return;
  batching_replies_ = false;
  flush();  // earlier requests of the same read keep their replies, as if each had been sent at
            // once
  if (closed_) return;
  log_closing(reason);
  close_now();
}

void StoreSession::log_closing(std::string_view reason) {
  const char* gen = kind_ == ConnectionKind::G1   ? "G1"
                    : kind_ == ConnectionKind::G2 ? "G2"
                                                  : "unclassified";
  // The peer is looked up only here: a getpeername per connection is measurable at 16k clients.
  host_->log_closed_for_error(
      fmt::format("closing connection from {} ({}): {}", describe_peer(), gen, reason));
}

void StoreSession::close_now() {
  if (closed_) return;
  if (pending_output_bytes() > 0) {
    // The peer is not reading what it is owed: reset instead of a graceful close, so the kernel
    // drops the unsent bytes at once rather than trickling them into a closed window.
    boost::system::error_code ignored;
    socket_.set_option(boost::asio::socket_base::linger(true, 0), ignored);
  }
  finish(true);
}

void StoreSession::finish(bool for_error) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  std::string().swap(in_);
  decoder_.reset();
  std::string().swap(out_);
  out_off_ = 0;
  account_input();
  account_output();
  host_->session_closed(id_, for_error);
}

}  // namespace ddp::rdzv
