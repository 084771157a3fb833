#include "rendezvous/proxy/worker_session.hpp"

#include <fmt/format.h>
#include <boost/asio/write.hpp>

#include "rendezvous/log.hpp"
#include "rendezvous/proxy/barrier_link.hpp"
#include "rendezvous/proxy/reply_reader.hpp"

namespace ddp::rdzv::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Worker connections are read on readiness into one buffer per thread, not one each: a 64 KiB
// array per connection was zero-filled and page-faulted in on every accept (docs/scale.md "Where
// the time goes at scale"). The bytes are consumed before the handler returns and one
// io_context runs on one thread, so no read overwrites them while in use.
constexpr std::size_t kScratchBytes = 65536;
asio::mutable_buffer read_scratch() {
  thread_local const std::unique_ptr<char[]> kScratch =
      std::make_unique_for_overwrite<char[]>(kScratchBytes);
  return {kScratch.get(), kScratchBytes};
}

bool names_reserved_key(const Command& cmd) {
  for (const auto& key : cmd.keys)
    if (is_reserved_key(key)) return true;
  return false;
}

}  // namespace

WorkerSession::WorkerSession(tcp::socket s, std::shared_ptr<StoreProxy::Core> core)
    : socket_(std::move(s)), core_(std::move(core)) {}

void WorkerSession::start() {
  // Reads happen on readiness (read_scratch()); a non-blocking socket makes a spurious readiness
  // a would_block instead of a stalled loop.
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  if (ec) return close("cannot make the connection non-blocking: " + ec.message());
  arm_read();
}

std::uint64_t WorkerSession::take_slot() {
  slots_.emplace_back();
  return slot_base_ + slots_.size() - 1;
}

std::size_t WorkerSession::held_bytes() const {
  return slot_bytes_ + out_.size() + writing_.size() + in_.size() +
         (decoder_ ? decoder_->held_bytes() : 0);
}

void WorkerSession::fill(std::uint64_t slot, std::string_view bytes) {
  if (closed_ || slot < slot_base_ || slot - slot_base_ >= slots_.size()) return;
  auto& s = slots_[slot - slot_base_];
  if (s) return;
  // As the store does: past the bound nothing more is read, and a reply arriving while past it
  // closes the connection instead of growing what it holds.
  const std::size_t cap = core_->opts.limits.max_pending_output_bytes;
  if (slot_bytes_ + out_.size() + writing_.size() > cap) {
    close(fmt::format("owed more than {} bytes (--max-pending-output-bytes)", cap));
    return;
  }
  s = std::string(bytes);
  slot_bytes_ += bytes.size();
  while (!slots_.empty() && slots_.front()) {
    slot_bytes_ -= slots_.front()->size();
    out_ += *slots_.front();
    slots_.pop_front();
    ++slot_base_;
  }
  flush();
  arm_read();
}

void WorkerSession::close(std::string_view why) {
  if (closed_) return;
  closed_ = true;
  if (!why.empty())
    log_named_line(fmt::format("ddprun-store-proxy: closing a worker connection: {}", why));
  boost::system::error_code ec;
  socket_.close(ec);
  drop_blocking();
  slots_.clear();
  std::string().swap(out_);
  std::string().swap(in_);
  decoder_.reset();
  slot_bytes_ = 0;
  if (core_->stats.downstream_connections > 0) --core_->stats.downstream_connections;
}

bool WorkerSession::stalled_since(std::chrono::steady_clock::time_point limit) const {
  const bool awaiting = (decoder_ && decoder_->mid_request()) || (!decoder_ && !in_.empty()) ||
                        !out_.empty() || !writing_.empty();
  return !closed_ && awaiting && last_progress_ < limit;
}

void WorkerSession::blocking_done() {
  blocking.reset();
  if (barrier_link) {
    auto link = std::move(barrier_link);
    barrier_link.reset();
    link->close();
  }
}

// The blocking request will not be answered: CANCEL_WAIT, a 1.13 client's next request after
// its WAIT timed out, or this worker closing.
void WorkerSession::drop_blocking() {
  if (!blocking) return;
  auto e = std::move(blocking);
  blocking.reset();
  core_->cancel(e, *this);
  if (barrier_link) {
    auto link = std::move(barrier_link);
    barrier_link.reset();
    link->close();  // the root drops the registration with the connection
  }
  if (!closed_) fill(blocking_slot, "");  // no reply owed: the slot stops holding later ones
}

void WorkerSession::arm_read() {
  if (closed_ || reading_) return;
  // Back-pressure: a worker that does not read its replies, has too many requests outstanding,
  // or writes while the link to the root is backed up, is not read from until that drains.
  if (slot_bytes_ + out_.size() + writing_.size() > core_->opts.limits.max_pending_output_bytes)
    return;
  if (slots_.size() > kMaxOutstandingRequests) return;
  if (core_->link_backlogged()) {
    if (!paused_) core_->pause(shared_from_this());
    paused_ = true;
    return;
  }
  reading_ = true;
  socket_.async_wait(
      tcp::socket::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
        self->reading_ = false;
        if (self->closed_) return;
        if (ec) return self->close();
        const auto scratch = read_scratch();
        boost::system::error_code rec;
        const std::size_t n = self->socket_.read_some(scratch, rec);
        if (rec == asio::error::would_block || rec == asio::error::try_again)
          return self->arm_read();
        self->last_progress_ = std::chrono::steady_clock::now();
        if (rec) return self->close();
        self->on_bytes(std::string_view(static_cast<const char*>(scratch.data()), n));
        self->arm_read();
      });
}

void WorkerSession::on_bytes(std::string_view data) {
  if (!decoder_) {
    in_.append(data);
    const auto kind = classify_connection(in_);
    if (kind == ConnectionKind::Undetermined) return;
    gen_ = kind == ConnectionKind::G2 ? Generation::G2 : Generation::G1;
    decoder_.emplace(gen_, core_->opts.limits);
    std::string held = std::move(in_);
    in_.clear();
    decode(held);
    return;
  }
  decode(data);
}

void WorkerSession::decode(std::string_view data) {
  while (!data.empty() && !closed_) {
    const auto step = decoder_->feed(data);
    data.remove_prefix(step.consumed);
    if (step.status == DecodeStatus::NeedMore) return;
    if (step.status == DecodeStatus::Bad) return close(decoder_->error());
    handle(decoder_->take());
  }
}

void WorkerSession::handle(Command&& cmd) {
  ++core_->stats.downstream_requests;
  const auto self = shared_from_this();
  if (gen_ == Generation::G2 && first_request_ && cmd.op != Op::Validate)
    return close("G2 connection did not start with VALIDATE");
  if (cmd.op == Op::Validate) {
    if (!first_request_) close("second VALIDATE");
    first_request_ = false;
    return;
  }
  first_request_ = false;
  // ddprun-store's own extensions are the proxy's dialect with the root, and a 1.13 WATCH_KEY
  // would need values the tagged link does not carry: not served (docs/scale.md).
  if (cmd.op == Op::Probe || cmd.op == Op::Tagged || cmd.op == Op::Unwatch ||
      cmd.op == Op::WatchKey) {
    ++core_->stats.refused_requests;
    return close(fmt::format("{} {} is not served by the store proxy", generation_name(gen_),
                             op_name(cmd.op)));
  }
  if (names_reserved_key(cmd)) {
    ++core_->stats.refused_requests;
    return close(
        fmt::format("{} of a key reserved for ddprun's agents (/ddprun...) is not served "
                    "by the store proxy",
                    op_name(cmd.op)));
  }
  // A 1.13 client only sends again after its WAIT timed out: forget that WAIT (docs/protocol.md).
  if (gen_ == Generation::G1 && blocking) drop_blocking();
  switch (cmd.op) {
    case Op::Ping: {
      std::string reply;
      put_u32(reply, cmd.word);
      fill(take_slot(), reply);
      return;
    }
    case Op::CancelWait: {
      drop_blocking();
      std::string reply;
      put_u8(reply, kWaitCanceled);
      fill(take_slot(), reply);
      return;
    }
    case Op::Wait:
    case Op::Barrier: {
      if (blocking) {
        ++core_->stats.refused_requests;
        return close(fmt::format("{} before its earlier {} was answered", op_name(cmd.op),
                                 op_name(blocking->cmd.op)));
      }
      blocking_slot = take_slot();
      if (cmd.op == Op::Wait) return core_->submit_wait(self, std::move(cmd), blocking_slot);
      return core_->submit_barrier(self, std::move(cmd), blocking_slot);
    }
    default: {
      std::optional<std::uint64_t> slot;
      if (reply_shape(cmd.op) != ReplyShape::None) slot = take_slot();
      core_->submit(self, std::move(cmd), slot);
      return;
    }
  }
}

void WorkerSession::flush() {
  if (closed_ || !writing_.empty() || out_.empty()) return;
  writing_.swap(out_);
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                      if (self->closed_) return;
                      if (ec) return self->close();
                      self->writing_.clear();
                      if (self->writing_.capacity() > kScratchBytes)
                        std::string().swap(self->writing_);
                      self->last_progress_ = std::chrono::steady_clock::now();
                      self->flush();
                      self->arm_read();
                    });
}

}  // namespace ddp::rdzv::proxy
