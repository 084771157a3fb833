#include "rendezvous/proxy/store_proxy.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/codec.hpp"
#include "rendezvous/log.hpp"
#include "rendezvous/proxy/reply_reader.hpp"
#include "rendezvous/proxy/wait_table.hpp"

namespace ddp::rdzv::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Worker connections and tunnels are read on readiness into one buffer per thread, not one each:
// a 64 KiB array per connection was zero-filled and page-faulted in on every accept (17-27% of a
// proxy farm's CPU at 64k ranks, docs/scale.md "Where the time goes at scale"). The bytes are
// consumed (decoded or copied) before the handler returns and one io_context runs on one thread,
// so no read can overwrite them while in use.
constexpr std::size_t kScratchBytes = 65536;
asio::mutable_buffer read_scratch() {
  thread_local const std::unique_ptr<char[]> kScratch =
      std::make_unique_for_overwrite<char[]>(kScratchBytes);
  return {kScratch.get(), kScratchBytes};
}

class Downstream;
class BlockingLink;
class WatchLink;

// One caller sharing an upstream request: where its answer goes.
struct Waiter {
  std::weak_ptr<Downstream> conn;
  std::uint64_t slot = 0;
  std::int64_t delta = 0;  // ADD: this caller's own delta
};

// One upstream request and everyone who will share its answer.
struct Entry {
  Command cmd;  // G2-neutral command as sent (ADD: number is the sum, set when sent)
  std::vector<Waiter> waiters;
  std::uint64_t seq = 0;  // position on the main link
  std::string coalesce_key;
  bool sent = false;
  // Fence (a PING on the main link) that releases these blocking entries when answered.
  std::vector<std::shared_ptr<Entry>> released_by_fence;
  // Blocking entries (WAIT/BARRIER): the main-link sequence a joiner's writes must not exceed.
  std::uint64_t fence_seq = 0;
  bool has_fence = false;
  std::weak_ptr<BlockingLink> link;
  // WAIT groups: callers who arrived after the group's CHECK or WAIT was sent. They cannot take
  // its answer (the key may have gone again before they arrived); they get a CHECK of their own.
  std::vector<Waiter> late;
  std::shared_ptr<Entry> check;   // the group's CHECK on the main link, while one is out
  bool waiting_upstream = false;  // the group's WAIT is out on a link
  std::weak_ptr<Entry> group;     // a CHECK entry: the WAIT group it decides
  // GET/MULTI_GET sent and not yet answered: identical reads arriving meanwhile gather here and
  // are sent together once this one is answered (at most one in flight and one waiting per key).
  std::shared_ptr<Entry> held_next;
  // A WAIT served by the watch link: its id in the WaitTable (0: not one).
  std::uint64_t watch_id = 0;
};

static bool is_write(Op op) {
  switch (op) {
    case Op::Set:
    case Op::CompareSet:
    case Op::Add:
    case Op::DeleteKey:
    case Op::Append:
    case Op::MultiSet:
    case Op::QueuePush:
    case Op::QueuePop:
    case Op::Barrier:
      return true;
    default:
      return false;
  }
}

static std::string coalesce_key_of(const Command& cmd) {
  std::string key;
  key.push_back(static_cast<char>(cmd.op));
  for (const auto& k : cmd.keys) put_bytes(key, k);
  return key;
}

// ----------------------------------------------------------------------------------------------
struct StoreProxy::Core : std::enable_shared_from_this<StoreProxy::Core> {
  Core(asio::io_context& io_context, StoreProxyOptions o)
      : io(io_context),
        opts(std::move(o)),
        acceptor(io_context),
        sweep_timer(io_context),
        tags_timer(io_context),
        wait_table(opts.max_watched_keys) {}

  asio::io_context& io;
  StoreProxyOptions opts;
  tcp::acceptor acceptor;
  asio::steady_timer sweep_timer;  // --idle-timeout for workers stalled mid-request
  StoreProxyStats stats;
  bool stopped = false;
  std::vector<std::weak_ptr<Downstream>> downstreams;

  // Main link: one pipelined G2 connection for everything but WAIT/BARRIER.
  std::optional<tcp::socket> main_socket;
  bool main_connected = false;
  bool main_connecting = false;
  // Each connection of the main link gets a new epoch: callbacks of an older one do nothing.
  std::uint64_t main_epoch = 0;
  // Tagged mode (ddprun-store's TAGGED extension, docs/scale.md "One root connection per
  // node"): the main link also carries WATCH_KEY, PROBE and UNWATCH for every WAIT, and the
  // root's notifications, each message tagged. Untried: asked for on the next connection.
  // Negotiating: TAGGED sent, every other request held until its answer. Refused: the root does
  // not know it (closed, or no answer within kTaggedTimeout): the main link is plain, WAITs use
  // the G1 watch link or WAIT links.
  enum class Tags { Untried, Negotiating, On, Refused };
  static constexpr std::chrono::seconds kTaggedTimeout{10};
  Tags tags = Tags::Untried;
  asio::steady_timer tags_timer;
  // WAITs that arrived while the main link's mode was not known yet, in arrival order.
  std::vector<std::shared_ptr<Entry>> waits_until_tags_known;
  std::vector<std::shared_ptr<Entry>> unsent;  // in order
  std::deque<std::shared_ptr<Entry>> inflight;
  std::string main_out;
  bool main_writing = false;
  bool flush_posted = false;
  std::string main_in;
  // Not zero-filled: only what a read writes is ever looked at.
  std::unique_ptr<char[]> main_read_buf = std::make_unique_for_overwrite<char[]>(kScratchBytes);
  std::uint64_t next_seq = 1;
  std::uint64_t completed_seq = 0;  // every main request up to here has been applied by the root
  std::unordered_map<std::string, std::shared_ptr<Entry>> unsent_reads;  // GET/MULTI_GET
  std::unordered_map<std::string, std::shared_ptr<Entry>> unsent_adds;
  std::unordered_map<std::string, std::shared_ptr<Entry>> inflight_reads;    // GET/MULTI_GET sent
  std::unordered_map<std::string, std::shared_ptr<Entry>> unreleased_waits;  // BARRIER (not shared)
  std::unordered_map<std::string, std::shared_ptr<Entry>> wait_groups;       // WAIT, by key list
  std::shared_ptr<Entry> open_fence;  // an unsent fence new blocking entries may share
  std::vector<std::shared_ptr<BlockingLink>> idle_links;

  // Watch link: every WAIT on one G1 connection (wait_table.hpp). Off until the first WAIT;
  // Unsupported once the root proved not to be a ddprun-store (WAIT links from then on).
  enum class WatchMode { Off, Open, Unsupported };
  WatchMode watch_mode = WatchMode::Off;
  bool watch_confirmed = false;  // a link's detection PROBE was answered once
  int watch_losses = 0;
  std::shared_ptr<WatchLink> watch;
  WaitTable wait_table;
  std::unordered_map<std::uint64_t, std::shared_ptr<Entry>> watch_waits;
  std::uint64_t next_watch_id = 1;
  bool watch_flush_posted = false;

  void accept();
  void arm_sweep();
  void enqueue_main(const std::shared_ptr<Entry>& e);
  void schedule_flush();
  void flush_main();
  void connect_main();
  void write_main(std::string bytes);
  void read_main();
  void on_main_bytes();
  void take_main_reply(std::string_view reply);
  void on_tagged_answer(std::string_view reply);
  void on_probe_answer(const std::shared_ptr<Entry>& e, std::string_view reply);
  void main_lost(const std::string& why);
  void tags_refused(const std::string& why);
  void main_failed(const std::string& why);
  void decide_held_waits();
  void resubmit_wait(const std::shared_ptr<Entry>& e, bool links_only);
  void answer(const std::shared_ptr<Entry>& e, std::string_view reply);
  void submit(const std::shared_ptr<Downstream>& d, Command&& cmd,
              std::optional<std::uint64_t> slot);
  void submit_blocking(const std::shared_ptr<Downstream>& d, Command&& cmd, std::uint64_t slot);
  void release_blocking(const std::shared_ptr<Entry>& e);
  void release_after_fence(const std::shared_ptr<Entry>& e);
  void submit_wait(const std::shared_ptr<Downstream>& d, Command&& cmd, std::uint64_t slot);
  void submit_wait_on_links(const std::shared_ptr<Downstream>& d, Command&& cmd,
                            std::uint64_t slot);
  void watch_release(const std::shared_ptr<Entry>& e);
  void schedule_watch_flush();
  void watch_flush();
  void watch_answered(const std::vector<std::uint64_t>& ids);
  void watch_cancel(const std::shared_ptr<Entry>& e);
  void watch_lost(const std::shared_ptr<WatchLink>& link, const std::string& why, bool refused);
  void to_wait_links(const std::shared_ptr<Entry>& e);
  void maybe_rotate_watch();
  void start_check(const std::shared_ptr<Entry>& g);
  void on_check(const std::shared_ptr<Entry>& g, bool ready);
  void on_wait_answered(const std::shared_ptr<Entry>& g);
  void end_group(const std::shared_ptr<Entry>& g);
  std::shared_ptr<BlockingLink> take_link();
  void link_done(const std::shared_ptr<BlockingLink>& link, bool reusable);
  void close_all(const std::string& why);
};

// ----------------------------------------------------------------------------------------------
// A worker's connection to the proxy.
class Downstream : public std::enable_shared_from_this<Downstream> {
 public:
  static constexpr std::size_t kMaxOutstandingRequests = 4096;

  Downstream(tcp::socket s, std::shared_ptr<StoreProxy::Core> core)
      : socket_(std::move(s)), core_(std::move(core)) {}

  void start() {
    // Reads happen on readiness (read_scratch()); a non-blocking socket makes a spurious
    // readiness a would_block instead of a stalled loop.
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    if (ec) return close("cannot make the connection non-blocking: " + ec.message());
    arm_read();
  }

  // Reply slots: every request with a reply takes the next slot; answers leave in slot order.
  std::uint64_t take_slot() {
    slots_.emplace_back();
    return slot_base_ + slots_.size() - 1;
  }
  void fill(std::uint64_t slot, std::string_view bytes) {
    if (closed_ || slot < slot_base_ || slot - slot_base_ >= slots_.size()) return;
    auto& s = slots_[slot - slot_base_];
    if (s) return;
    s = std::string(bytes);
    while (!slots_.empty() && slots_.front()) {
      out_ += *slots_.front();
      slots_.pop_front();
      ++slot_base_;
    }
    if (out_.size() - out_off_ > core_->opts.limits.max_pending_output_bytes) {
      close("owed more than --max-pending-output-bytes");
      return;
    }
    flush();
    arm_read();
  }
  // Raw bytes in order after every owed reply (the G1 watch tunnel).
  void relay(std::string_view bytes) { fill(take_slot(), bytes); }

  void close(std::string_view why = {}) {
    if (closed_) return;
    closed_ = true;
    if (!why.empty())
      log_named_line(fmt::format("ddprun-store-proxy: closing worker connection: {}", why));
    boost::system::error_code ec;
    socket_.close(ec);
    if (tunnel_) tunnel_->close(ec);
    if (pending_blocking_) drop_waiter(pending_blocking_);
    pending_blocking_.reset();
    if (core_->stats.downstream_connections > 0) --core_->stats.downstream_connections;
  }
  bool closed() const { return closed_; }

  // In the middle of a request, or owed output it does not read: what --idle-timeout bounds.
  // A worker between requests (blocked in WAIT, idle) is never timed out.
  bool stalled_since(std::chrono::steady_clock::time_point limit) const {
    const bool awaiting = (decoder_ && decoder_->mid_request()) || (!decoder_ && !in_.empty()) ||
                          out_off_ < out_.size();
    return !closed_ && awaiting && last_progress_ < limit;
  }

  std::uint64_t last_write_seq = 0;
  std::shared_ptr<Entry> pending_blocking_;
  std::uint64_t pending_blocking_slot_ = 0;

  void drop_waiter(const std::shared_ptr<Entry>& e) {
    for (auto* list : {&e->waiters, &e->late}) {
      for (auto it = list->begin(); it != list->end(); ++it) {
        if (it->conn.lock().get() == this && it->slot == pending_blocking_slot_) {
          list->erase(it);
          break;
        }
      }
    }
    fill(pending_blocking_slot_, "");
    if (e->watch_id != 0) {
      core_->watch_cancel(e);
      return;
    }
    if (e->cmd.op == Op::Wait) {
      if (e->waiters.empty() && e->late.empty()) {
        if (e->waiting_upstream) {
          // The root still holds the registration: that connection cannot be reused.
          if (auto link = e->link.lock()) core_->link_done(link, false);
          e->waiting_upstream = false;
        }
        if (!e->check) core_->end_group(e);  // else the CHECK's answer ends it
      }
      return;
    }
    auto& w = e->waiters;
    if (w.empty()) {
      if (!e->sent) {
        core_->unreleased_waits.erase(e->coalesce_key);
      } else if (auto link = e->link.lock()) {
        // The root still holds the registration: that connection cannot be reused.
        core_->link_done(link, false);
      }
    }
  }

 private:
  void arm_read() {
    if (closed_ || reading_) return;
    // Back-pressure: a worker that does not read its replies, or has too many requests
    // outstanding, is not read from until that drains (resumes in flush / fill).
    if (out_.size() - out_off_ > core_->opts.limits.max_pending_output_bytes) return;
    if (slots_.size() > kMaxOutstandingRequests) return;
    reading_ = true;
    socket_.async_wait(
        tcp::socket::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
          self->reading_ = false;
          if (self->closed_) return;
          if (ec) {
            self->close();
            return;
          }
          const auto scratch = read_scratch();
          boost::system::error_code rec;
          const std::size_t n = self->socket_.read_some(scratch, rec);
          if (rec == asio::error::would_block || rec == asio::error::try_again) {
            self->arm_read();
            return;
          }
          self->last_progress_ = std::chrono::steady_clock::now();
          if (rec) {
            self->close();
            return;
          }
          self->on_bytes(std::string_view(static_cast<const char*>(scratch.data()), n));
          self->arm_read();
        });
  }

  void on_bytes(std::string_view data) {
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

  void decode(std::string_view data) {
    while (!data.empty() && !closed_) {
      const auto step = decoder_->feed(data);
      data.remove_prefix(step.consumed);
      if (step.status == DecodeStatus::NeedMore) return;
      if (step.status == DecodeStatus::Bad) {
        close(decoder_->error());
        return;
      }
      handle(decoder_->take());
    }
  }

  void handle(Command&& cmd);

  void flush() {
    if (closed_ || writing_ || out_off_ == out_.size()) return;
    writing_ = true;
    asio::async_write(
        socket_, asio::buffer(out_.data() + out_off_, out_.size() - out_off_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          self->writing_ = false;
          if (self->closed_) return;
          if (ec) {
            self->close();
            return;
          }
          self->out_off_ += n;
          self->last_progress_ = std::chrono::steady_clock::now();
          if (self->out_off_ == self->out_.size()) {
            self->out_.clear();
            self->out_off_ = 0;
          }
          self->flush();
          self->arm_read();
        });
  }

  void start_tunnel(Command&& first);
  void tunnel_read();

  tcp::socket socket_;
  std::shared_ptr<StoreProxy::Core> core_;
  std::string in_;
  Generation gen_ = Generation::G2;
  std::optional<RequestDecoder> decoder_;
  bool first_request_ = true;
  std::deque<std::optional<std::string>> slots_;
  std::uint64_t slot_base_ = 0;
  std::string out_;
  std::size_t out_off_ = 0;
  bool writing_ = false;
  bool reading_ = false;
  bool closed_ = false;
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
  // G1 watch connections are tunnelled to the root as they are.
  std::unique_ptr<tcp::socket> tunnel_;
};

// A dedicated upstream connection for one WAIT or BARRIER at a time.
class BlockingLink : public std::enable_shared_from_this<BlockingLink> {
 public:
  BlockingLink(std::shared_ptr<StoreProxy::Core> core)
      : core_(std::move(core)), socket_(core_->io) {}

  void connect_and_send(const std::shared_ptr<Entry>& e) {
    entry_ = e;
    const std::string request = encode_request(Generation::G2, e->cmd);
    ++core_->stats.upstream_requests;
    if (connected_) {
      write(request);
      return;
    }
    ++core_->stats.upstream_connections_opened;
    tcp::resolver resolver(core_->io);
    boost::system::error_code ec;
    auto endpoints =
        resolver.resolve(core_->opts.upstream_host, std::to_string(core_->opts.upstream_port), ec);
    if (ec) return fail("cannot resolve the root store: " + ec.message());
    asio::async_connect(socket_, endpoints,
                        [self = shared_from_this(), request](const boost::system::error_code& cec,
                                                             const tcp::endpoint&) {
                          if (cec)
                            return self->fail("cannot reach the root store: " + cec.message());
                          self->socket_.set_option(tcp::no_delay(true));
                          self->connected_ = true;
                          std::string hello;
                          put_u8(hello, wire_from_op(Generation::G2, Op::Validate));
                          put_u32(hello, kValidateMagic);
                          self->write(hello + request);
                          self->read();
                        });
  }

  void close() {
    boost::system::error_code ec;
    socket_.close(ec);
    closed_ = true;
  }

 private:
  void write(std::string bytes) {
    auto buf = std::make_shared<std::string>(std::move(bytes));
    asio::async_write(
        socket_, asio::buffer(*buf),
        [self = shared_from_this(), buf](const boost::system::error_code& ec, std::size_t) {
          if (ec) self->fail("root store connection lost: " + ec.message());
        });
  }
  void read() {
    socket_.async_read_some(
        asio::buffer(byte_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (ec || n == 0) {
            if (self->closed_) return;
            return self->fail("root store connection lost: " +
                              (ec ? ec.message() : std::string("EOF")));
          }
          auto e = std::move(self->entry_);
          self->entry_.reset();
          if (!e) return self->fail("unexpected bytes from the root store");
          self->core_->answer(e, std::string_view(self->byte_.data(), 1));
          self->core_->link_done(self, true);
          if (!self->closed_) self->read();
        });
  }
  void fail(const std::string& why) {
    if (closed_) return;
    close();
    if (entry_) {
      auto e = std::move(entry_);
      entry_.reset();
      auto waiters = std::move(e->waiters);
      auto late = std::move(e->late);
      e->waiters.clear();
      e->late.clear();
      e->waiting_upstream = false;
      // The group is over: a later WAIT on the same keys starts afresh.
      if (e->cmd.op == Op::Wait) core_->end_group(e);
      for (auto* list : {&waiters, &late})
        for (auto& w : *list)
          if (auto d = w.conn.lock()) d->close(why);
    }
  }

  std::shared_ptr<StoreProxy::Core> core_;
  tcp::socket socket_;
  bool connected_ = false;
  bool closed_ = false;
  std::shared_ptr<Entry> entry_;
  std::array<char, 1> byte_{};
};

// ----------------------------------------------------------------------------------------------
// The watch link: one G1 connection to the root carrying WATCH_KEY and PROBE for every WAIT
// (wait_table.hpp). Its first request is a PROBE of no keys: only a ddprun-store answers it (a
// 1.13 store closes on the unknown opcode, a 2.x store on a G1 connection), so an answer proves
// the root supports the link, and anything else sends the WAITs back to WAIT links. Until the
// answer comes, another PROBE of no keys follows every 200 ms: the libuv store holds a
// connection's first command unparsed until more bytes arrive, then closes on the unknown opcode.
class WatchLink : public std::enable_shared_from_this<WatchLink> {
 public:
  static constexpr std::chrono::seconds kDetectTimeout{10};
  static constexpr std::chrono::milliseconds kDetectNudge{200};

  explicit WatchLink(std::shared_ptr<StoreProxy::Core> core)
      : core_(std::move(core)), socket_(core_->io), timer_(core_->io) {}

  void open(bool detect) {
    detecting_ = detect;
    ++core_->stats.upstream_connections_opened;
    if (detect) {
      out_ = empty_probe() + out_;
      probes_.push_front(OwedProbe{0, false});
      detect_deadline_ = std::chrono::steady_clock::now() + kDetectTimeout;
      nudge();
    }
    tcp::resolver resolver(core_->io);
    boost::system::error_code ec;
    auto endpoints =
        resolver.resolve(core_->opts.upstream_host, std::to_string(core_->opts.upstream_port), ec);
    if (ec) return fail("cannot resolve the root store: " + ec.message(), false);
    asio::async_connect(
        socket_, endpoints,
        [self = shared_from_this()](const boost::system::error_code& cec, const tcp::endpoint&) {
          if (self->closed_) return;
          if (cec) return self->fail("cannot reach the root store: " + cec.message(), false);
          boost::system::error_code ignored;
          self->socket_.set_option(tcp::no_delay(true), ignored);
          self->connected_ = true;
          self->read();
          self->flush();
        });
  }

  // Requests in order: `registrations` WATCH_KEYs, then a PROBE of `probe_keys` keys if any.
  void send(const std::string& bytes, std::size_t registrations,
            std::optional<std::size_t> probe_keys) {
    out_ += bytes;
    registrations_ += registrations;
    if (probe_keys) probes_.push_back(OwedProbe{*probe_keys, true});
    flush();
  }

  bool idle() const { return registrations_ == 0 && probes_.empty(); }

  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    socket_.close(ec);
    timer_.cancel();
  }

 private:
  std::string empty_probe() {
    ++core_->stats.upstream_requests;
    return encode_request(Generation::G1, Command{Op::Probe, {}, {}, 0, 0});
  }

  void nudge() {
    timer_.expires_after(kDetectNudge);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->closed_ || !self->detecting_) return;
      if (std::chrono::steady_clock::now() >= self->detect_deadline_) {
        return self->fail(
            "the root store did not answer the watch link's PROBE: not a ddprun-store", true);
      }
      if (self->connected_) {
        self->out_ += self->empty_probe();
        self->probes_.push_back(OwedProbe{0, false});
        self->flush();
      }
      self->nudge();
    });
  }

  void flush() {
    if (closed_ || !connected_ || writing_ || out_.empty()) return;
    writing_ = true;
    auto buf = std::make_shared<std::string>(std::move(out_));
    out_.clear();
    asio::async_write(
        socket_, asio::buffer(*buf),
        [self = shared_from_this(), buf](const boost::system::error_code& ec, std::size_t) {
          self->writing_ = false;
          if (self->closed_) return;
          if (ec)
            return self->fail("root store connection lost: " + ec.message(), self->detecting_);
          self->flush();
        });
  }

  void read() {
    socket_.async_read_some(
        asio::buffer(buf_.get(), kScratchBytes),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (self->closed_) return;
          if (ec) return self->fail("watch link lost: " + ec.message(), self->detecting_);
          self->in_.append(self->buf_.get(), n);
          self->parse();
          if (!self->closed_) self->read();
        });
  }

  void parse() {
    std::size_t off = 0;
    while (!closed_) {
      std::optional<WatchMessage> m;
      try {
        m = parse_watch_message(
            std::string_view(in_).substr(off),
            probes_.empty() ? std::nullopt : std::optional<std::size_t>(probes_.front().keys),
            core_->opts.limits.max_reply_bytes);
      } catch (const std::exception& e) {
        return fail(std::string("watch link: ") + e.what(), detecting_);
      }
      if (!m) break;
      off += m->size;
      std::vector<std::uint64_t> done;
      if (m->kind == WatchMessage::Kind::Registered) {
        if (registrations_ == 0) return fail("watch link: unexpected registration reply", true);
        --registrations_;
        continue;
      }
      if (m->kind == WatchMessage::Kind::ProbeReply) {
        const bool for_table = probes_.front().table;
        probes_.pop_front();
        if (!for_table) {  // a detection PROBE (or a nudge after it)
          if (detecting_) {
            detecting_ = false;
            timer_.cancel();
            core_->watch_confirmed = true;
          }
          continue;
        }
        try {
          done = core_->wait_table.on_probe_reply(m->exists);
        } catch (const std::exception& e) {
          return fail(std::string("watch link: ") + e.what(), true);
        }
      } else {
        done = core_->wait_table.on_event(m->key, m->type);
      }
      if (!done.empty()) core_->watch_answered(done);
    }
    in_.erase(0, off);
    if (!closed_) core_->maybe_rotate_watch();
  }

  void fail(const std::string& why, bool refused) {
    if (closed_) return;
    close();
    core_->watch_lost(shared_from_this(), why, refused);
  }

  std::shared_ptr<StoreProxy::Core> core_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  bool connected_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool detecting_ = false;
  std::string out_;
  std::string in_;
  std::size_t registrations_ = 0;  // WATCH_KEY replies owed
  struct OwedProbe {
    std::size_t keys = 0;
    bool table = false;  // one of the WaitTable's (else detection)
  };
  std::deque<OwedProbe> probes_;  // PROBE replies owed, in order
  std::chrono::steady_clock::time_point detect_deadline_{};
  std::unique_ptr<char[]> buf_ = std::make_unique_for_overwrite<char[]>(kScratchBytes);
};

// ----------------------------------------------------------------------------------------------
void Downstream::handle(Command&& cmd) {
  ++core_->stats.downstream_requests;
  const auto self = shared_from_this();
  if (tunnel_) {
    auto buf = std::make_shared<std::string>(encode_request(Generation::G1, cmd));
    asio::async_write(*tunnel_, asio::buffer(*buf),
                      [self, buf](const boost::system::error_code& ec, std::size_t) {
                        if (ec) self->close("root store connection lost");
                      });
    return;
  }
  if (gen_ == Generation::G2 && first_request_ && cmd.op != Op::Validate) {
    close("G2 connection did not start with VALIDATE");
    return;
  }
  if (cmd.op == Op::Validate) {
    if (!first_request_) close("second VALIDATE");
    first_request_ = false;
    return;
  }
  first_request_ = false;
  // ddprun-store's own extensions are the proxy's upstream dialect, not served to workers (a
  // worker's TAGGED would change the framing of the link the proxy shares between workers).
  if (cmd.op == Op::Probe || cmd.op == Op::Tagged || cmd.op == Op::Unwatch ||
      (gen_ == Generation::G2 && cmd.op == Op::WatchKey)) {
    close(fmt::format("{} {} is not served by the store proxy", generation_name(gen_),
                      op_name(cmd.op)));
    return;
  }
  // A 1.13 client only sends again after its WAIT timed out: forget that WAIT (docs/protocol.md).
  if (gen_ == Generation::G1 && pending_blocking_) {
    auto e = std::move(pending_blocking_);
    pending_blocking_.reset();
    drop_waiter(e);
  }
  switch (cmd.op) {
    case Op::Ping: {
      std::string reply;
      put_u32(reply, cmd.word);
      fill(take_slot(), reply);
      return;
    }
    case Op::CancelWait: {
      if (pending_blocking_) {
        auto e = std::move(pending_blocking_);
        pending_blocking_.reset();
        drop_waiter(e);
      }
      std::string reply;
      put_u8(reply, kWaitCanceled);
      fill(take_slot(), reply);
      return;
    }
    case Op::WatchKey:
      start_tunnel(std::move(cmd));
      return;
    case Op::Wait:
    case Op::Barrier: {
      const auto slot = take_slot();
      pending_blocking_slot_ = slot;
      if (cmd.op == Op::Wait) {
        core_->submit_wait(self, std::move(cmd), slot);
      } else {
        core_->submit_blocking(self, std::move(cmd), slot);
      }
      return;
    }
    default: {
      std::optional<std::uint64_t> slot;
      if (reply_shape(cmd.op) != ReplyShape::None) slot = take_slot();
      core_->submit(self, std::move(cmd), slot);
      return;
    }
  }
}

void Downstream::start_tunnel(Command&& first) {
  tunnel_ = std::make_unique<tcp::socket>(core_->io);
  ++core_->stats.upstream_connections_opened;
  ++core_->stats.upstream_requests;
  tcp::resolver resolver(core_->io);
  boost::system::error_code ec;
  auto endpoints =
      resolver.resolve(core_->opts.upstream_host, std::to_string(core_->opts.upstream_port), ec);
  if (ec) return close("cannot resolve the root store");
  auto request = std::make_shared<std::string>(encode_request(Generation::G1, first));
  asio::async_connect(*tunnel_, endpoints,
                      [self = shared_from_this(), request](const boost::system::error_code& cec,
                                                           const tcp::endpoint&) {
                        if (self->closed_) return;
                        if (cec) return self->close("cannot reach the root store");
                        boost::system::error_code nbec;
                        self->tunnel_->non_blocking(true, nbec);
                        if (nbec) return self->close("cannot make the tunnel non-blocking");
                        asio::async_write(
                            *self->tunnel_, asio::buffer(*request),
                            [self, request](const boost::system::error_code& wec, std::size_t) {
                              if (wec) self->close("root store connection lost");
                            });
                        self->tunnel_read();
                      });
}

void Downstream::tunnel_read() {
  tunnel_->async_wait(tcp::socket::wait_read,
                      [self = shared_from_this()](const boost::system::error_code& ec) {
                        if (self->closed_) return;
                        if (ec) return self->close();
                        const auto scratch = read_scratch();
                        boost::system::error_code rec;
                        const std::size_t n = self->tunnel_->read_some(scratch, rec);
                        if (rec == asio::error::would_block || rec == asio::error::try_again)
                          return self->tunnel_read();
                        if (rec) return self->close();
                        self->relay(std::string_view(static_cast<const char*>(scratch.data()), n));
                        self->tunnel_read();
                      });
}

// ----------------------------------------------------------------------------------------------
void StoreProxy::Core::accept() {
  acceptor.async_accept(
      [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
        if (self->stopped) return;
        if (!ec) {
          if (self->stats.downstream_connections >= self->opts.limits.max_connections) {
            boost::system::error_code ignored;
            socket.close(ignored);
          } else {
            boost::system::error_code ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            auto d = std::make_shared<Downstream>(std::move(socket), self);
            ++self->stats.downstream_connections;
            std::erase_if(self->downstreams, [](const auto& w) { return w.expired(); });
            self->downstreams.push_back(d);
            d->start();
          }
        }
        self->accept();
      });
}

void StoreProxy::Core::arm_sweep() {
  const auto idle = opts.limits.idle_timeout;
  if (idle.count() <= 0 || stopped) return;
  sweep_timer.expires_after(
      std::clamp(idle / 4, std::chrono::milliseconds(25), std::chrono::milliseconds(1000)));
  sweep_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->stopped) return;
    const auto limit = std::chrono::steady_clock::now() - self->opts.limits.idle_timeout;
    std::erase_if(self->downstreams, [](const auto& w) { return w.expired(); });
    for (auto& w : self->downstreams) {
      if (auto d = w.lock(); d && d->stalled_since(limit))
        d->close("no progress for --idle-timeout");
    }
    self->arm_sweep();
  });
}

void StoreProxy::Core::submit(const std::shared_ptr<Downstream>& d, Command&& cmd,
                              std::optional<std::uint64_t> slot) {
  // Coalescing: join an identical request not yet sent, placed after every write of this caller.
  if (slot && (cmd.op == Op::Get || cmd.op == Op::MultiGet || cmd.op == Op::Add)) {
    auto& table = cmd.op == Op::Add ? unsent_adds : unsent_reads;
    const std::string key = coalesce_key_of(cmd);
    auto it = table.find(key);
    if (it != table.end() && !it->second->sent && d->last_write_seq <= it->second->seq) {
      auto& e = it->second;
      e->waiters.push_back(Waiter{d, *slot, cmd.number});
      if (cmd.op == Op::Add) {
        e->cmd.number = static_cast<std::int64_t>(static_cast<std::uint64_t>(e->cmd.number) +
                                                  static_cast<std::uint64_t>(cmd.number));
        d->last_write_seq = e->seq;
      }
      ++stats.coalesced_requests;
      return;
    }
    if (cmd.op != Op::Add) {
      auto f = inflight_reads.find(key);
      if (f != inflight_reads.end()) {
        auto& held = f->second->held_next;
        if (!held) {
          held = std::make_shared<Entry>();
          held->coalesce_key = key;
          held->cmd = std::move(cmd);
        } else {
          ++stats.coalesced_requests;
        }
        held->waiters.push_back(Waiter{d, *slot, 0});
        return;
      }
    }
    auto e = std::make_shared<Entry>();
    e->coalesce_key = key;
    e->waiters.push_back(Waiter{d, *slot, cmd.number});
    e->cmd = std::move(cmd);
    enqueue_main(e);
    table[key] = e;
    if (e->cmd.op == Op::Add) d->last_write_seq = e->seq;
    return;
  }
  auto e = std::make_shared<Entry>();
  if (slot) e->waiters.push_back(Waiter{d, *slot, 0});
  e->cmd = std::move(cmd);
  enqueue_main(e);
  if (is_write(e->cmd.op)) d->last_write_seq = e->seq;
}

void StoreProxy::Core::submit_blocking(const std::shared_ptr<Downstream>& d, Command&& cmd,
                                       std::uint64_t slot) {
  const bool coalescible = false;  // BARRIER: forwarded as is (each call counts)
  const std::string key = coalescible ? coalesce_key_of(cmd) : std::string();
  if (coalescible) {
    auto it = unreleased_waits.find(key);
    if (it != unreleased_waits.end()) {
      auto& e = it->second;
      const bool writes_covered =
          e->has_fence ? d->last_write_seq < e->fence_seq : d->last_write_seq <= completed_seq;
      if (!e->sent && writes_covered) {
        e->waiters.push_back(Waiter{d, slot, 0});
        d->pending_blocking_ = e;
        ++stats.coalesced_requests;
        return;
      }
    }
  }
  auto e = std::make_shared<Entry>();
  e->coalesce_key = key;
  e->cmd = std::move(cmd);
  e->waiters.push_back(Waiter{d, slot, 0});
  d->pending_blocking_ = e;
  if (coalescible) unreleased_waits[key] = e;
  if (d->last_write_seq > completed_seq) {
    // Some of this caller's writes may not have reached the root yet.
    release_after_fence(e);
  } else {
    // Released at the end of this turn, so that identical WAITs read in the same turn share it.
    asio::post(io, [self = shared_from_this(), e] { self->release_blocking(e); });
  }
}

// A PING on the main link behind the caller's writes (one connection, processed in order): its
// answer means they reached the root, and releases e. Entries read before it is sent share it.
void StoreProxy::Core::release_after_fence(const std::shared_ptr<Entry>& e) {
  if (!open_fence || open_fence->sent) {
    open_fence = std::make_shared<Entry>();
    open_fence->cmd.op = Op::Ping;
    open_fence->cmd.word = 0x00FF0000u;
    enqueue_main(open_fence);
  }
  e->has_fence = true;
  e->fence_seq = open_fence->seq;
  open_fence->released_by_fence.push_back(e);
}

void StoreProxy::Core::release_blocking(const std::shared_ptr<Entry>& e) {
  if (e->watch_id != 0) return watch_release(e);
  if (e->sent || stopped) return;
  if (!e->coalesce_key.empty()) {
    auto it = unreleased_waits.find(e->coalesce_key);
    if (it != unreleased_waits.end() && it->second == e) unreleased_waits.erase(it);
  }
  if (e->waiters.empty()) return;  // everyone cancelled
  e->sent = true;
  auto link = take_link();
  e->link = link;
  link->connect_and_send(e);
}

std::shared_ptr<BlockingLink> StoreProxy::Core::take_link() {
  if (!idle_links.empty()) {
    auto link = idle_links.back();
    idle_links.pop_back();
    return link;
  }
  return std::make_shared<BlockingLink>(shared_from_this());
}

void StoreProxy::Core::link_done(const std::shared_ptr<BlockingLink>& link, bool reusable) {
  if (reusable && !stopped && idle_links.size() < opts.max_idle_blocking_connections) {
    idle_links.push_back(link);
  } else {
    link->close();
  }
}

// WAIT: with a ddprun-store root on the main link itself (tagged mode), else on the G1 watch
// link when the root has PROBE (wait_table.hpp, docs/scale.md "WAITs on one watch link"), else on
// WAIT links (submit_wait_on_links). Until the main link's mode is known, WAITs are held.
void StoreProxy::Core::submit_wait(const std::shared_ptr<Downstream>& d, Command&& cmd,
                                   std::uint64_t slot) {
  if (opts.max_watched_keys == 0) return submit_wait_on_links(d, std::move(cmd), slot);
  if (tags == Tags::Refused && watch_mode == WatchMode::Unsupported)
    return submit_wait_on_links(d, std::move(cmd), slot);
  auto e = std::make_shared<Entry>();
  e->cmd = std::move(cmd);
  e->waiters.push_back(Waiter{d, slot, 0});
  e->watch_id = next_watch_id++;
  d->pending_blocking_ = e;
  watch_waits[e->watch_id] = e;
  switch (tags) {
    case Tags::Untried:
    case Tags::Negotiating:
      waits_until_tags_known.push_back(e);
      if (!main_connected) connect_main();
      return;
    case Tags::On:
      // No fence: the PROBE goes out on the main link behind every write this caller sent
      // before (one connection, processed in order).
      return watch_release(e);
    case Tags::Refused:
      break;
  }
  if (!watch) {
    watch = std::make_shared<WatchLink>(shared_from_this());
    watch_mode = WatchMode::Open;
    watch->open(!watch_confirmed);
  }
  if (d->last_write_seq > completed_seq) {
    // Probed only once the caller's own writes were applied.
    release_after_fence(e);
    return;
  }
  watch_release(e);
}

void StoreProxy::Core::watch_release(const std::shared_ptr<Entry>& e) {
  if (stopped || e->waiters.empty()) return;  // cancelled meanwhile
  if (!watch_waits.contains(e->watch_id)) return to_wait_links(e);
  if (tags != Tags::On && !watch) return to_wait_links(e);
  if (!wait_table.add(e->watch_id, e->cmd.keys)) {
    if (tags == Tags::On) maybe_rotate_watch();  // over the bound: shed what nobody needs
    return to_wait_links(e);
  }
  schedule_watch_flush();
}

// The main link's mode is known: the WAITs held meanwhile take the path it allows.
void StoreProxy::Core::decide_held_waits() {
  auto held = std::move(waits_until_tags_known);
  waits_until_tags_known.clear();
  for (auto& e : held) resubmit_wait(e, false);
}

// A WAIT served again from the start, by another path (links_only: WAIT links). Its new path
// checks the key after the re-submission, itself after the WAIT's arrival: nothing is early.
void StoreProxy::Core::resubmit_wait(const std::shared_ptr<Entry>& e, bool links_only) {
  watch_waits.erase(e->watch_id);
  if (stopped || e->waiters.empty()) return;  // cancelled
  auto w = e->waiters.front();
  e->waiters.clear();
  auto d = w.conn.lock();
  if (!d || d->closed()) return;
  if (d->pending_blocking_ == e) d->pending_blocking_.reset();
  Command cmd = e->cmd;
  if (links_only) return submit_wait_on_links(d, std::move(cmd), w.slot);
  submit_wait(d, std::move(cmd), w.slot);
}

void StoreProxy::Core::schedule_watch_flush() {
  if (watch_flush_posted) return;
  watch_flush_posted = true;
  // At the end of this turn: WAITs read in the same turn share one PROBE.
  asio::post(io, [self = shared_from_this()] {
    self->watch_flush_posted = false;
    self->watch_flush();
  });
}

void StoreProxy::Core::watch_flush() {
  if (stopped) return;
  if (tags == Tags::On) {
    // On the main link, in order with the writes: WATCH_KEYs, the PROBE, then UNWATCHes of keys
    // nobody waits on any more (when due).
    auto batch = wait_table.take_batch();
    auto enqueue = [&](Op op, std::vector<std::string> keys) {
      auto e = std::make_shared<Entry>();
      e->cmd.op = op;
      e->cmd.keys = std::move(keys);
      enqueue_main(e);
    };
    for (auto& key : batch.watch) enqueue(Op::WatchKey, {std::move(key)});
    if (batch.has_probe) {
      stats.coalesced_requests += batch.waits - 1;  // one PROBE for every WAIT of this turn
      enqueue(Op::Probe, std::move(batch.probe));
    }
    if (wait_table.unwatch_due()) {
      for (auto& key : wait_table.take_unwatch()) {
        ++stats.unwatched_keys;
        enqueue(Op::Unwatch, {std::move(key)});
      }
    }
    return;
  }
  if (!watch) return;
  auto batch = wait_table.take_batch();
  std::string bytes;
  for (auto& key : batch.watch) {
    bytes += encode_request(Generation::G1, Command{Op::WatchKey, {std::move(key)}, {}, 0, 0});
    ++stats.upstream_requests;
  }
  std::optional<std::size_t> probe_keys;
  if (batch.has_probe) {
    probe_keys = batch.probe.size();
    stats.coalesced_requests += batch.waits - 1;  // one PROBE for every WAIT of this turn
    bytes += encode_request(Generation::G1, Command{Op::Probe, std::move(batch.probe), {}, 0, 0});
    ++stats.upstream_requests;
  }
  if (!bytes.empty()) watch->send(bytes, batch.watch.size(), probe_keys);
}

void StoreProxy::Core::watch_answered(const std::vector<std::uint64_t>& ids) {
  std::string stop;
  put_u8(stop, kStopWaiting);
  for (auto id : ids) {
    auto it = watch_waits.find(id);
    if (it == watch_waits.end()) continue;
    auto e = std::move(it->second);
    watch_waits.erase(it);
    ++stats.watch_waits;
    for (auto& w : e->waiters)
      if (auto d = w.conn.lock()) {
        if (d->pending_blocking_ == e) d->pending_blocking_.reset();
        d->fill(w.slot, stop);
      }
    e->waiters.clear();
  }
}

void StoreProxy::Core::watch_cancel(const std::shared_ptr<Entry>& e) {
  wait_table.cancel(e->watch_id);
  watch_waits.erase(e->watch_id);
  maybe_rotate_watch();
}

// The link failed. `refused`: the root answered in a way only a store without the PROBE
// extension does (or not at all): WAIT links from now on. Otherwise (connection lost) a later
// WAIT opens a new link, up to a few times. Either way the WAITs it held go to WAIT links: they
// are checked again there, after their arrival, so nothing is answered early.
void StoreProxy::Core::watch_lost(const std::shared_ptr<WatchLink>& link, const std::string& why,
                                  bool refused) {
  if (watch != link) return;
  watch.reset();
  ++watch_losses;
  const bool give_up = refused || watch_losses >= 3;
  watch_mode = give_up ? WatchMode::Unsupported : WatchMode::Off;
  log_named_line(fmt::format("ddprun-store-proxy: {}; {}", why,
                             give_up ? "WAITs use one upstream connection each from now on"
                                     : "its WAITs move to WAIT links"));
  auto held = std::move(watch_waits);
  watch_waits.clear();
  wait_table = WaitTable(opts.max_watched_keys);
  std::vector<std::shared_ptr<Entry>> order;
  for (auto& [id, e] : held) order.push_back(e);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a->watch_id < b->watch_id; });
  for (auto& e : order) to_wait_links(e);
}

void StoreProxy::Core::to_wait_links(const std::shared_ptr<Entry>& e) { resubmit_wait(e, true); }

// Registrations nobody needs any more. On the tagged main link: UNWATCH them (in the next
// watch_flush) once many keys are watched or keys nobody waits on keep notifying. On the G1
// watch link the root cannot unwatch: a link in that state is closed once it holds no WAIT (the
// root drops its registrations), and the next WAIT opens a fresh one.
void StoreProxy::Core::maybe_rotate_watch() {
  if (tags == Tags::On) {
    if (wait_table.unwatch_due()) schedule_watch_flush();
    return;
  }
  if (!watch || !watch_waits.empty() || !wait_table.quiescent() || !watch->idle()) return;
  const bool many_keys = wait_table.watched_keys() * 2 > opts.max_watched_keys;
  const bool noisy = wait_table.idle_events() > 1024;
  if (!many_keys && !noisy) return;
  watch->close();
  watch.reset();
  watch_mode = WatchMode::Off;
  wait_table = WaitTable(opts.max_watched_keys);
}

// WAIT: a CHECK on the main link first. It is behind every write its callers sent before (one
// connection, in order), so READY answers them at once, NOT_READY sends one WAIT on a link for
// everyone waiting on the same keys. See docs/rendezvous.md, "Store proxy".
void StoreProxy::Core::submit_wait_on_links(const std::shared_ptr<Downstream>& d, Command&& cmd,
                                            std::uint64_t slot) {
  const std::string key = coalesce_key_of(cmd);
  d->pending_blocking_.reset();
  auto it = wait_groups.find(key);
  if (it != wait_groups.end()) {
    auto& g = it->second;
    const bool early = g->check && !g->check->sent && d->last_write_seq < g->check->seq;
    (early ? g->waiters : g->late).push_back(Waiter{d, slot, 0});
    d->pending_blocking_ = g;
    ++stats.coalesced_requests;
    return;
  }
  auto g = std::make_shared<Entry>();
  g->coalesce_key = key;
  g->cmd = std::move(cmd);
  g->waiters.push_back(Waiter{d, slot, 0});
  d->pending_blocking_ = g;
  wait_groups[key] = g;
  start_check(g);
}

void StoreProxy::Core::start_check(const std::shared_ptr<Entry>& g) {
  auto c = std::make_shared<Entry>();
  c->cmd.op = Op::Check;
  c->cmd.keys = g->cmd.keys;
  c->group = g;
  g->check = c;
  enqueue_main(c);
}

void StoreProxy::Core::on_check(const std::shared_ptr<Entry>& g, bool ready) {
  g->check.reset();
  if (stopped) return;
  if (ready) {
    std::string stop;
    put_u8(stop, kStopWaiting);
    for (auto& w : g->waiters)
      if (auto d = w.conn.lock()) {
        if (d->pending_blocking_ == g) d->pending_blocking_.reset();
        d->fill(w.slot, stop);
      }
    g->waiters = std::move(g->late);
    g->late.clear();
    if (g->waiters.empty()) return end_group(g);
    return start_check(g);
  }
  // Not ready: everyone here now waits on one upstream WAIT sent after their arrival, except
  // callers whose own writes may not have reached the root yet (they need a CHECK behind them).
  std::vector<Waiter> still_late;
  for (auto& w : g->late) {
    auto d = w.conn.lock();
    if (!d) continue;
    if (d->last_write_seq <= completed_seq) {
      g->waiters.push_back(w);
    } else {
      still_late.push_back(w);
    }
  }
  g->late = std::move(still_late);
  if (g->waiters.empty()) {
    if (g->late.empty()) return end_group(g);
    g->waiters = std::move(g->late);
    g->late.clear();
    return start_check(g);
  }
  g->waiting_upstream = true;
  g->sent = false;
  auto link = take_link();
  g->link = link;
  g->sent = true;
  link->connect_and_send(g);
}

void StoreProxy::Core::on_wait_answered(const std::shared_ptr<Entry>& g) {
  g->waiting_upstream = false;
  std::string stop;
  put_u8(stop, kStopWaiting);
  for (auto& w : g->waiters)
    if (auto d = w.conn.lock()) {
      if (d->pending_blocking_ == g) d->pending_blocking_.reset();
      d->fill(w.slot, stop);
    }
  g->waiters = std::move(g->late);
  g->late.clear();
  if (g->waiters.empty()) return end_group(g);
  start_check(g);
}

void StoreProxy::Core::end_group(const std::shared_ptr<Entry>& g) {
  auto it = wait_groups.find(g->coalesce_key);
  if (it != wait_groups.end() && it->second == g) wait_groups.erase(it);
}

void StoreProxy::Core::enqueue_main(const std::shared_ptr<Entry>& e) {
  e->seq = next_seq++;
  unsent.push_back(e);
  schedule_flush();
}

void StoreProxy::Core::schedule_flush() {
  if (flush_posted || main_writing) return;
  flush_posted = true;
  // At the end of this turn: requests read in the same turn may still join what is queued.
  asio::post(io, [self = shared_from_this()] {
    self->flush_posted = false;
    self->flush_main();
  });
}

void StoreProxy::Core::flush_main() {
  if (stopped || main_writing || unsent.empty()) return;
  if (!main_connected) {
    connect_main();
    return;
  }
  if (tags == Tags::Negotiating) return;  // held until the root answered TAGGED
  std::string out;
  for (auto& e : unsent) {
    e->sent = true;
    out += encode_request(Generation::G2, e->cmd);
    ++stats.upstream_requests;
    // Requests without a reply count as applied once a later reply arrives (FIFO link).
    if (reply_shape(e->cmd.op) != ReplyShape::None) inflight.push_back(e);
  }
  for (auto& [key, e] : unsent_reads) inflight_reads[key] = e;
  unsent.clear();
  unsent_reads.clear();
  unsent_adds.clear();
  write_main(std::move(out));
}

void StoreProxy::Core::write_main(std::string bytes) {
  main_out = std::move(bytes);
  main_writing = true;
  asio::async_write(*main_socket, asio::buffer(main_out),
                    [self = shared_from_this(), epoch = main_epoch](
                        const boost::system::error_code& ec, std::size_t) {
                      if (epoch != self->main_epoch || self->stopped) return;
                      self->main_writing = false;
                      if (ec) return self->main_lost("root store connection lost: " + ec.message());
                      self->flush_main();
                    });
}

void StoreProxy::Core::connect_main() {
  if (main_connecting || main_connected || stopped) return;
  main_connecting = true;
  ++main_epoch;
  main_socket.emplace(io);
  ++stats.upstream_connections_opened;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(opts.upstream_host, std::to_string(opts.upstream_port), ec);
  if (ec)
    return main_failed("cannot resolve the root store " + opts.upstream_host + ": " + ec.message());
  asio::async_connect(
      *main_socket, endpoints,
      [self = shared_from_this(), epoch = main_epoch](const boost::system::error_code& cec,
                                                      const tcp::endpoint&) {
        if (epoch != self->main_epoch || self->stopped) return;
        self->main_connecting = false;
        if (cec) return self->main_failed("cannot reach the root store: " + cec.message());
        boost::system::error_code ignored;
        self->main_socket->set_option(tcp::no_delay(true), ignored);
        self->main_connected = true;
        auto validate = std::make_shared<Entry>();
        validate->cmd.op = Op::Validate;
        validate->cmd.word = kValidateMagic;
        self->read_main();
        if (self->tags == Tags::Untried && self->opts.max_watched_keys > 0) {
          // VALIDATE and TAGGED alone; everything queued waits for the answer (a root that does
          // not know TAGGED closes the connection: what was sent behind it would be lost, or,
          // from a root that skipped it, applied with replies we could not frame).
          auto tagged = std::make_shared<Entry>();
          tagged->cmd.op = Op::Tagged;
          tagged->cmd.word = kTaggedVersion;
          self->tags = Tags::Negotiating;
          self->inflight.push_back(tagged);
          self->stats.upstream_requests += 2;
          self->write_main(encode_request(Generation::G2, validate->cmd) +
                           encode_request(Generation::G2, tagged->cmd));
          self->tags_timer.expires_after(kTaggedTimeout);
          self->tags_timer.async_wait([self, epoch](const boost::system::error_code& tec) {
            if (tec || epoch != self->main_epoch || self->tags != Tags::Negotiating) return;
            self->tags_refused(
                fmt::format("no answer to TAGGED within {} s", kTaggedTimeout.count()));
          });
          return;
        }
        // VALIDATE goes first in the same write as the queued requests.
        self->unsent.insert(self->unsent.begin(), validate);
        self->flush_main();
      });
}

void StoreProxy::Core::read_main() {
  main_socket->async_read_some(
      asio::buffer(main_read_buf.get(), kScratchBytes),
      [self = shared_from_this(), epoch = main_epoch](const boost::system::error_code& ec,
                                                      std::size_t n) {
        if (epoch != self->main_epoch || self->stopped) return;
        if (ec) return self->main_lost("root store connection lost: " + ec.message());
        self->main_in.append(self->main_read_buf.get(), n);
        self->on_main_bytes();
        if (epoch == self->main_epoch && self->main_connected) self->read_main();
      });
}

// The root's messages, in order. Plain: replies only, each shaped by the oldest request in
// flight. Tagged: replies and notifications, told apart by their tag.
void StoreProxy::Core::on_main_bytes() {
  const std::uint64_t epoch = main_epoch;
  const bool tagged = tags == Tags::Negotiating || tags == Tags::On;
  std::size_t off = 0;
  while (epoch == main_epoch) {  // a failure handled meanwhile starts a new epoch
    const std::string_view rest = std::string_view(main_in).substr(off);
    std::optional<ExpectedReply> next;
    if (!inflight.empty())
      next =
          ExpectedReply{reply_shape(inflight.front()->cmd.op), inflight.front()->cmd.keys.size()};
    if (tagged) {
      std::optional<TaggedMessage> m;
      try {
        m = parse_tagged_message(rest, next, opts.limits.max_reply_bytes);
      } catch (const std::exception& err) {  // runtime_error or length_error: not our root
        return main_lost(std::string("bad message on the tagged main link: ") + err.what());
      }
      if (!m) break;
      off += m->size;
      if (m->kind == TaggedMessage::Kind::Event) {
        const auto done = wait_table.on_event(std::string(m->key), m->type);
        if (!done.empty()) watch_answered(done);
        continue;
      }
      take_main_reply(m->reply);
      continue;
    }
    if (!next) break;
    std::optional<std::size_t> size;
    try {
      size = complete_reply_size(next->shape, next->count, rest, opts.limits.max_reply_bytes);
    } catch (const std::length_error& err) {
      return main_failed(err.what());
    }
    if (!size) break;
    off += *size;
    take_main_reply(rest.substr(0, *size));
  }
  if (epoch != main_epoch) return;
  main_in.erase(0, off);
  if (!tagged && inflight.empty() && !main_in.empty())
    return main_failed("unexpected bytes from the root store");
  if (tags == Tags::On) maybe_rotate_watch();
}

// The reply to the oldest request in flight on the main link.
void StoreProxy::Core::take_main_reply(std::string_view reply) {
  auto e = inflight.front();
  inflight.pop_front();
  completed_seq = std::max(completed_seq, e->seq);
  switch (e->cmd.op) {
    case Op::Tagged:
      return on_tagged_answer(reply);
    case Op::WatchKey:
      if (reply != std::string_view("\x03", 1)) return main_lost("unexpected reply to WATCH_KEY");
      break;
    case Op::Unwatch:
      break;
    case Op::Probe:
      on_probe_answer(e, reply);
      break;
    default:
      if (auto g = e->group.lock(); g && e->cmd.op == Op::Check) {
        on_check(g, !reply.empty() && reply[0] == static_cast<char>(kCheckReady));
      } else {
        answer(e, reply);
        if (e->cmd.op == Op::Get || e->cmd.op == Op::MultiGet) {
          auto f = inflight_reads.find(e->coalesce_key);
          if (f != inflight_reads.end() && f->second == e) inflight_reads.erase(f);
          if (auto held = std::move(e->held_next)) {
            // Sent now, after every caller in it arrived: they share its answer (rule 2).
            enqueue_main(held);
            unsent_reads[held->coalesce_key] = held;
          }
        }
      }
      break;
  }
  for (auto& b : e->released_by_fence) release_blocking(b);
}

void StoreProxy::Core::on_tagged_answer(std::string_view reply) {
  if (reply != std::string_view("\x01", 1)) return tags_refused("unexpected answer to TAGGED");
  tags = Tags::On;
  tags_timer.cancel();
  ++stats.tagged_main_links;
  decide_held_waits();
  flush_main();  // what was held behind TAGGED, and the held WAITs' PROBE at the end of the turn
}

void StoreProxy::Core::on_probe_answer(const std::shared_ptr<Entry>& e, std::string_view reply) {
  const std::size_t n = e->cmd.keys.size();
  if (reply.size() != 1 + n || static_cast<std::uint8_t>(reply[0]) != kProbeReplyTag)
    return main_lost("bad PROBE reply on the main link");
  std::vector<bool> exists(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto b = static_cast<std::uint8_t>(reply[1 + i]);
    if (b > 1) return main_lost("bad byte in a PROBE reply on the main link");
    exists[i] = b == 1;
  }
  std::vector<std::uint64_t> done;
  try {
    done = wait_table.on_probe_reply(exists);
  } catch (const std::runtime_error& err) {
    return main_lost(std::string("main link: ") + err.what());
  }
  if (!done.empty()) watch_answered(done);
}

// The main link failed. While TAGGED is unanswered that is the root refusing it; after, the root
// went away.
void StoreProxy::Core::main_lost(const std::string& why) {
  if (tags == Tags::Negotiating) return tags_refused(why);
  main_failed(why);
}

// Nothing but VALIDATE and TAGGED was sent on the connection: drop it and connect again without
// TAGGED; the requests held meanwhile go out on the new one.
void StoreProxy::Core::tags_refused(const std::string& why) {
  log_named_line(fmt::format(
      "ddprun-store-proxy: the root store does not support tagged mode ({}); reconnecting the "
      "main link without it (WAITs through a watch link or WAIT links)",
      why));
  boost::system::error_code ignored;
  if (main_socket) main_socket->close(ignored);
  ++main_epoch;
  tags = Tags::Refused;
  tags_timer.cancel();
  main_connected = false;
  main_connecting = false;
  main_writing = false;
  main_in.clear();
  inflight.clear();
  decide_held_waits();
  connect_main();
}

void StoreProxy::Core::answer(const std::shared_ptr<Entry>& e, std::string_view reply) {
  if (e->cmd.op == Op::Wait) {
    on_wait_answered(e);
    return;
  }
  if (e->cmd.op == Op::Add && reply.size() == 8) {
    // One upstream ADD of the sum S answered R: caller i, in arrival order, gets
    // R - S + (d1 + ... + di), as if the ADDs had run back to back at the root.
    std::uint64_t value = static_cast<std::uint64_t>(get_i64(reply.data())) -
                          static_cast<std::uint64_t>(e->cmd.number);
    for (auto& w : e->waiters) {
      value += static_cast<std::uint64_t>(w.delta);
      std::string mine;
      put_i64(mine, static_cast<std::int64_t>(value));
      if (auto d = w.conn.lock()) d->fill(w.slot, mine);
    }
    return;
  }
  for (auto& w : e->waiters) {
    if (auto d = w.conn.lock()) {
      if ((e->cmd.op == Op::Wait || e->cmd.op == Op::Barrier) && d->pending_blocking_ == e)
        d->pending_blocking_.reset();
      d->fill(w.slot, reply);
    }
  }
}

void StoreProxy::Core::main_failed(const std::string& why) {
  log_named_line("ddprun-store-proxy: " + why + "; closing the workers' connections");
  boost::system::error_code ignored;
  if (main_socket) main_socket->close(ignored);
  ++main_epoch;
  main_connected = false;
  main_connecting = false;
  main_writing = false;
  tags_timer.cancel();
  if (tags != Tags::Refused) tags = Tags::Untried;  // the next connection asks again
  waits_until_tags_known.clear();
  main_in.clear();
  inflight.clear();
  unsent.clear();
  unsent_reads.clear();
  unsent_adds.clear();
  inflight_reads.clear();
  unreleased_waits.clear();
  wait_groups.clear();
  open_fence.reset();
  if (watch) {
    auto link = std::move(watch);
    watch.reset();
    link->close();
  }
  watch_waits.clear();
  wait_table = WaitTable(opts.max_watched_keys);
  if (watch_mode == WatchMode::Open) watch_mode = WatchMode::Off;
  // The workers see what they would see if the store itself went away.
  close_all(why);
}

void StoreProxy::Core::close_all(const std::string& why) {
  for (auto& w : downstreams)
    if (auto d = w.lock()) d->close(why);
  downstreams.clear();
  for (auto& l : idle_links) l->close();
  idle_links.clear();
}

// ----------------------------------------------------------------------------------------------
StoreProxy::StoreProxy(asio::io_context& io, const StoreProxyOptions& opts)
    : core_(std::make_shared<Core>(io, opts)) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(opts.bind_address, ec);
  if (ec) throw std::runtime_error("bad --proxy address '" + opts.bind_address + "'");
  const tcp::endpoint ep(address, opts.port);
  core_->acceptor.open(ep.protocol(), ec);
  if (!ec) core_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) core_->acceptor.bind(ep, ec);
  if (!ec) core_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("cannot listen on {}:{}: {}", opts.bind_address, opts.port, ec.message()));
  }
}

StoreProxy::~StoreProxy() { stop(); }

std::uint16_t StoreProxy::port() const { return core_->acceptor.local_endpoint().port(); }

void StoreProxy::start() {
  core_->accept();
  core_->arm_sweep();
}

void StoreProxy::stop() {
  if (core_->stopped) return;
  core_->stopped = true;
  boost::system::error_code ec;
  core_->acceptor.close(ec);
  core_->sweep_timer.cancel();
  core_->tags_timer.cancel();
  if (core_->main_socket) core_->main_socket->close(ec);
  if (core_->watch) core_->watch->close();
  core_->close_all("");
}

StoreProxyStats StoreProxy::stats() const { return core_->stats; }

}  // namespace ddp::rdzv::proxy
