#include "rendezvous/proxy/root_link.hpp"

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/proxy/reply_reader.hpp"

namespace ddp::rdzv::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
constexpr std::size_t kReadBytes = 65536;
}

RootLink::RootLink(std::shared_ptr<StoreProxy::Core> core)
    : core_(std::move(core)),
      socket_(core_->io),
      timer_(core_->io),
      read_buf_(std::make_unique_for_overwrite<char[]>(kReadBytes)) {}

void RootLink::open() {
  ++core_->stats.upstream_connections_opened;
  tcp::resolver resolver(core_->io);
  boost::system::error_code ec;
  auto endpoints =
      resolver.resolve(core_->opts.upstream_host, std::to_string(core_->opts.upstream_port), ec);
  if (ec) {
    // Reported after this turn: the caller is in the middle of enqueueing.
    asio::post(core_->io, [self = shared_from_this(), why = ec.message()] {
      self->fail("cannot resolve the root store: " + why);
    });
    return;
  }
  asio::async_connect(
      socket_, endpoints,
      [self = shared_from_this()](const boost::system::error_code& cec, const tcp::endpoint&) {
        if (self->state_ == State::Closed) return;
        if (cec) return self->fail("cannot reach the root store: " + cec.message());
        boost::system::error_code ignored;
        self->socket_.set_option(tcp::no_delay(true), ignored);
        self->state_ = State::Negotiating;
        auto tagged = std::make_shared<Entry>();
        tagged->cmd.op = Op::Tagged;
        tagged->cmd.word = kTaggedVersion;
        self->inflight_.push_back(tagged);
        self->core_->stats.upstream_requests += 2;
        self->write(
            encode_request(Generation::G2, Command{Op::Validate, {}, {}, 0, kValidateMagic}) +
            encode_request(Generation::G2, tagged->cmd));
        self->read();
        self->timer_.expires_after(kTaggedTimeout);
        self->timer_.async_wait([self](const boost::system::error_code& tec) {
          if (tec || self->state_ != State::Negotiating) return;
          self->fail(fmt::format("the root store did not answer TAGGED within {} s",
                                 kTaggedTimeout.count()));
        });
      });
}

void RootLink::enqueue(std::shared_ptr<Entry> e) {
  unsent_bytes_ += e->wire_bytes();
  unsent_.push_back(std::move(e));
  schedule_flush();
}

void RootLink::schedule_flush() {
  if (flush_posted_) return;
  flush_posted_ = true;
  // At the end of this turn: requests read in the same turn may still join what is queued.
  asio::post(core_->io, [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->flush();
  });
}

void RootLink::flush() {
  if (state_ != State::Ready || !writing_.empty() || unsent_.empty()) return;
  std::string out;
  for (auto& e : unsent_) {
    e->sent = true;
    out += encode_request(Generation::G2, e->cmd);
    ++core_->stats.upstream_requests;
    // Requests without a reply count as applied once a later reply arrives (one ordered link).
    if (reply_shape(e->cmd.op) != ReplyShape::None) inflight_.push_back(std::move(e));
  }
  for (auto& [key, e] : core_->unsent_reads) core_->inflight_reads[key] = e;
  core_->unsent_reads.clear();
  core_->unsent_adds.clear();
  unsent_.clear();
  unsent_bytes_ = 0;
  write(std::move(out));
}

void RootLink::write(std::string bytes) {
  writing_ = std::move(bytes);
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                      if (self->state_ == State::Closed) return;
                      if (ec) return self->fail("root store connection lost: " + ec.message());
                      std::string().swap(self->writing_);
                      self->flush();
                      if (!self->core_->link_backlogged()) self->core_->link_drained();
                    });
}

void RootLink::read() {
  socket_.async_read_some(
      asio::buffer(read_buf_.get(), kReadBytes),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (self->state_ == State::Closed) return;
        if (ec) return self->fail("root store connection lost: " + ec.message());
        self->in_.append(self->read_buf_.get(), n);
        self->parse();
        if (self->state_ != State::Closed) self->read();
      });
}

// The root's messages, in order: replies (to the oldest request in flight) and notifications.
void RootLink::parse() {
  const auto self = shared_from_this();  // a message may end the Core's hold on this link
  std::size_t off = 0;
  while (state_ != State::Closed) {
    std::optional<ExpectedReply> next;
    if (!inflight_.empty())
      next =
          ExpectedReply{reply_shape(inflight_.front()->cmd.op), inflight_.front()->cmd.keys.size()};
    std::optional<TaggedMessage> m;
    try {
      m = parse_tagged_message(std::string_view(in_).substr(off), next,
                               core_->opts.limits.max_reply_bytes);
    } catch (const std::exception& err) {  // runtime_error or length_error: not our root
      return fail(std::string("bad message from the root store: ") + err.what());
    }
    if (!m) break;
    off += m->size;
    if (m->kind == TaggedMessage::Kind::Event) {
      core_->on_event(std::string(m->key), m->type);
      continue;
    }
    take_reply(m->reply);
  }
  if (state_ == State::Closed) return;
  in_.erase(0, off);
  if (in_.capacity() > 4 * kReadBytes && in_.size() < kReadBytes) in_.shrink_to_fit();
}

void RootLink::take_reply(std::string_view reply) {
  auto e = std::move(inflight_.front());
  inflight_.pop_front();
  completed_seq_ = std::max(completed_seq_, e->seq);
  switch (e->cmd.op) {
    case Op::Tagged:
      if (reply != std::string_view("\x01", 1))
        return fail("the root store refused tagged mode (not a ddprun-store?)");
      state_ = State::Ready;
      timer_.cancel();
      ++core_->stats.tagged_main_links;
      return flush();
    case Op::WatchKey:
      if (reply != std::string_view("\x03", 1)) return fail("unexpected reply to WATCH_KEY");
      return;
    case Op::Unwatch:
      return;
    default:
      core_->on_reply(e, reply);
      return;
  }
}

void RootLink::close() {
  if (state_ == State::Closed) return;
  state_ = State::Closed;
  boost::system::error_code ec;
  socket_.close(ec);
  timer_.cancel();
  unsent_.clear();
  inflight_.clear();
}

void RootLink::fail(const std::string& why) {
  if (state_ == State::Closed) return;
  const auto self = shared_from_this();
  close();
  core_->on_link_lost(*this, why);
}

}  // namespace ddp::rdzv::proxy
