#include "rendezvous/proxy/store_proxy.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/post.hpp>

#include "rendezvous/log.hpp"
#include "rendezvous/proxy/barrier_link.hpp"
#include "rendezvous/proxy/proxy_core.hpp"
#include "rendezvous/proxy/reply_reader.hpp"
#include "rendezvous/proxy/root_link.hpp"
#include "rendezvous/proxy/worker_session.hpp"

namespace ddp::rdzv::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

bool is_write(Op op) {
  switch (op) {
    case Op::Set:
    case Op::CompareSet:
    case Op::Add:
    case Op::DeleteKey:
    case Op::Append:
    case Op::MultiSet:
    case Op::QueuePush:
    case Op::QueuePop:
      return true;
    default:
      return false;
  }
}

std::string coalesce_key_of(const Command& cmd) {
  std::string key;
  key.push_back(static_cast<char>(cmd.op));
  for (const auto& k : cmd.keys) put_bytes(key, k);
  return key;
}

constexpr std::chrono::milliseconds kAcceptPause{100};

}  // namespace

bool is_reserved_key(std::string_view key) {
  constexpr std::string_view kPrefix = "/ddprun";
  if (key.substr(0, kPrefix.size()) != kPrefix || key.size() == kPrefix.size()) return false;
  const char next = key[kPrefix.size()];
  return next == '/' || next == '.' || next == '-';
}

std::size_t Entry::wire_bytes() const {
  std::size_t n = 16;
  for (const auto& k : cmd.keys) n += 8 + k.size();
  for (const auto& v : cmd.values) n += 8 + v.size();
  return n;
}

StoreProxy::Core::Core(asio::io_context& io_context, StoreProxyOptions o)
    : io(io_context),
      opts(std::move(o)),
      acceptor(io_context),
      accept_pause(io_context),
      sweep_timer(io_context),
      wait_table(opts.max_watched_keys) {}

// ----------------------------------------------------------------------------------------------
// Workers come and go.
void StoreProxy::Core::accept() {
  acceptor.async_accept(
      [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
        if (self->stopped) return;
        if (ec) {
          // Out of descriptors (EMFILE, ENFILE, ENOBUFS...): try again a little later, never spin.
          ++self->stats.accept_errors;
          self->accept_pause.expires_after(kAcceptPause);
          self->accept_pause.async_wait([self](const boost::system::error_code& tec) {
            if (!tec && !self->stopped) self->accept();
          });
          return;
        }
        if (self->stats.downstream_connections >= self->opts.limits.max_connections) {
          boost::system::error_code ignored;
          socket.close(ignored);
        } else {
          boost::system::error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);
          auto w = std::make_shared<WorkerSession>(std::move(socket), self);
          ++self->stats.downstream_connections;
          std::erase_if(self->workers, [](const auto& weak) { return weak.expired(); });
          self->workers.push_back(w);
          w->start();
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
    std::erase_if(self->workers, [](const auto& w) { return w.expired(); });
    for (auto& weak : self->workers) {
      if (auto w = weak.lock(); w && w->stalled_since(limit))
        w->close("no progress for --idle-timeout");
    }
    self->arm_sweep();
  });
}

void StoreProxy::Core::close_all(const std::string& why) {
  for (auto& weak : workers)
    if (auto w = weak.lock()) w->close(why);
  workers.clear();
  paused.clear();
}

// ----------------------------------------------------------------------------------------------
// The link and its back-pressure.
RootLink& StoreProxy::Core::root() {
  if (!link) {
    link = std::make_shared<RootLink>(shared_from_this());
    link->open();
  }
  return *link;
}

std::uint64_t StoreProxy::Core::completed_seq() const { return link ? link->completed_seq() : 0; }

bool StoreProxy::Core::link_backlogged() const {
  return link && link->queued_bytes() > opts.max_link_queue_bytes;
}

void StoreProxy::Core::pause(const std::shared_ptr<WorkerSession>& w) { paused.push_back(w); }

void StoreProxy::Core::link_drained() {
  auto resumed = std::move(paused);
  paused.clear();
  for (auto& weak : resumed)
    if (auto w = weak.lock()) w->resume();
}

void StoreProxy::Core::enqueue(const std::shared_ptr<Entry>& e) {
  e->seq = next_seq++;
  root().enqueue(e);
}

// The link failed: the workers see what they would see if the store itself went away, and the
// next request opens a new link.
void StoreProxy::Core::on_link_lost(const RootLink& lost, const std::string& why) {
  if (link.get() != &lost) return;
  log_named_line("ddprun-store-proxy: " + why + "; closing the workers' connections");
  link.reset();
  unsent_reads.clear();
  unsent_adds.clear();
  inflight_reads.clear();
  open_fence.reset();
  waits.clear();
  waits_for_room.clear();
  wait_table = WaitTable(opts.max_watched_keys);
  close_all(why);
}

// ----------------------------------------------------------------------------------------------
// Requests with an answer from the link (everything but WAIT and BARRIER).
void StoreProxy::Core::submit(const std::shared_ptr<WorkerSession>& w, Command&& cmd,
                              std::optional<std::uint64_t> slot) {
  // Coalescing: join an identical request not yet sent, placed after every write of this worker.
  if (slot && (cmd.op == Op::Get || cmd.op == Op::MultiGet || cmd.op == Op::Add)) {
    auto& table = cmd.op == Op::Add ? unsent_adds : unsent_reads;
    const std::string key = coalesce_key_of(cmd);
    auto it = table.find(key);
    if (it != table.end() && !it->second->sent && w->last_write_seq <= it->second->seq) {
      auto& e = it->second;
      e->waiters.push_back(Waiter{w, *slot, cmd.number});
      if (cmd.op == Op::Add) {
        e->cmd.number = static_cast<std::int64_t>(static_cast<std::uint64_t>(e->cmd.number) +
                                                  static_cast<std::uint64_t>(cmd.number));
        w->last_write_seq = e->seq;
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
        held->waiters.push_back(Waiter{w, *slot, 0});
        return;
      }
    }
    auto e = std::make_shared<Entry>();
    e->coalesce_key = key;
    e->waiters.push_back(Waiter{w, *slot, cmd.number});
    e->cmd = std::move(cmd);
    enqueue(e);
    table[key] = e;
    if (e->cmd.op == Op::Add) w->last_write_seq = e->seq;
    return;
  }
  auto e = std::make_shared<Entry>();
  if (slot) e->waiters.push_back(Waiter{w, *slot, 0});
  e->cmd = std::move(cmd);
  enqueue(e);
  if (is_write(e->cmd.op)) w->last_write_seq = e->seq;
}

void StoreProxy::Core::on_reply(const std::shared_ptr<Entry>& e, std::string_view reply) {
  if (e->cmd.op == Op::Probe) {
    const std::size_t n = e->cmd.keys.size();
    if (reply.size() != 1 + n || static_cast<std::uint8_t>(reply[0]) != kProbeReplyTag) {
      const auto lost = link;
      lost->close();
      return on_link_lost(*lost, "bad PROBE reply from the root store");
    }
    std::vector<bool> exists(n);
    for (std::size_t i = 0; i < n; ++i) exists[i] = reply[1 + i] == 1;
    answer_waits(wait_table.on_probe_reply(exists));
    return;
  }
  for (auto& b : e->released_by_fence) release_barrier(b);
  if (e->cmd.op == Op::Add && reply.size() == 8) {
    // One ADD of the sum S answered R: worker i, in arrival order, gets R - S + (d1 + ... + di),
    // as if the ADDs had run back to back at the root.
    std::uint64_t value = static_cast<std::uint64_t>(get_i64(reply.data())) -
                          static_cast<std::uint64_t>(e->cmd.number);
    for (auto& waiter : e->waiters) {
      value += static_cast<std::uint64_t>(waiter.delta);
      std::string mine;
      put_i64(mine, static_cast<std::int64_t>(value));
      if (auto w = waiter.worker.lock()) w->fill(waiter.slot, mine);
    }
    return;
  }
  for (auto& waiter : e->waiters)
    if (auto w = waiter.worker.lock()) w->fill(waiter.slot, reply);
  if (e->cmd.op == Op::Get || e->cmd.op == Op::MultiGet) {
    auto f = inflight_reads.find(e->coalesce_key);
    if (f != inflight_reads.end() && f->second == e) inflight_reads.erase(f);
    if (auto held = std::move(e->held_next)) {
      // Sent now, after every worker in it arrived: they share its answer.
      enqueue(held);
      unsent_reads[held->coalesce_key] = held;
    }
  }
}

// ----------------------------------------------------------------------------------------------
// WAIT: WATCH_KEY + PROBE on the link, behind the worker's own writes (wait_table.hpp).
void StoreProxy::Core::submit_wait(const std::shared_ptr<WorkerSession>& w, Command&& cmd,
                                   std::uint64_t slot) {
  auto e = std::make_shared<Entry>();
  e->cmd = std::move(cmd);
  e->waiters.push_back(Waiter{w, slot, 0});
  e->wait_id = next_wait_id++;
  const std::unordered_set<std::string_view> distinct(e->cmd.keys.begin(), e->cmd.keys.end());
  if (distinct.size() > opts.max_watched_keys) {
    ++stats.refused_requests;
    w->close(
        fmt::format("WAIT on {} keys: the node's proxy watches at most {} "
                    "(--max-watched-keys)",
                    distinct.size(), opts.max_watched_keys));
    return;
  }
  w->blocking = e;
  waits[e->wait_id] = e;
  root();  // the link exists before the WAIT's PROBE is due
  waits_for_room.push_back(e);
  admit_waits();
}

// WAITs whose keys would take the link past --max-watched-keys wait in line, in arrival order,
// until answered WAITs free room (keys nobody needs are unwatched first).
void StoreProxy::Core::admit_waits() {
  bool shed = false;
  while (!waits_for_room.empty()) {
    const auto& e = waits_for_room.front();
    if (!waits.contains(e->wait_id)) {  // cancelled while in line
      waits_for_room.pop_front();
      continue;
    }
    if (!wait_table.add(e->wait_id, e->cmd.keys)) {
      if (shed) break;
      shed = true;
      for (auto& key : wait_table.take_unwatch()) {
        ++stats.unwatched_keys;
        auto u = std::make_shared<Entry>();
        u->cmd.op = Op::Unwatch;
        u->cmd.keys = {std::move(key)};
        enqueue(u);
      }
      continue;
    }
    waits_for_room.pop_front();
    schedule_wait_flush();
  }
}

void StoreProxy::Core::schedule_wait_flush() {
  if (wait_flush_posted) return;
  wait_flush_posted = true;
  // At the end of this turn: WAITs read in the same turn share one PROBE.
  asio::post(io, [self = shared_from_this()] {
    self->wait_flush_posted = false;
    self->flush_waits();
  });
}

void StoreProxy::Core::flush_waits() {
  if (stopped) return;
  auto send = [&](Op op, std::vector<std::string> keys) {
    auto e = std::make_shared<Entry>();
    e->cmd.op = op;
    e->cmd.keys = std::move(keys);
    enqueue(e);
  };
  // WATCH_KEYs, then the PROBE (at most a request's key bound), then UNWATCHes when due.
  for (auto batch = wait_table.take_batch(opts.limits.max_keys_per_request); !batch.empty();
       batch = wait_table.take_batch(opts.limits.max_keys_per_request)) {
    for (auto& key : batch.watch) send(Op::WatchKey, {std::move(key)});
    if (batch.has_probe) {
      stats.coalesced_requests += batch.waits - 1;  // one PROBE for every WAIT of this turn
      send(Op::Probe, std::move(batch.probe));
    }
  }
  if (wait_table.unwatch_due()) {
    for (auto& key : wait_table.take_unwatch()) {
      ++stats.unwatched_keys;
      send(Op::Unwatch, {std::move(key)});
    }
  }
}

void StoreProxy::Core::on_event(const std::string& key, WatchEventType type) {
  answer_waits(wait_table.on_event(key, type));
  if (wait_table.unwatch_due()) schedule_wait_flush();
}

void StoreProxy::Core::answer_waits(const std::vector<std::uint64_t>& ids) {
  std::string stop;
  put_u8(stop, kStopWaiting);
  for (auto id : ids) {
    auto it = waits.find(id);
    if (it == waits.end()) continue;
    auto e = std::move(it->second);
    waits.erase(it);
    ++stats.watch_waits;
    for (auto& waiter : e->waiters)
      if (auto w = waiter.worker.lock()) {
        if (w->blocking == e) w->blocking_done();
        w->fill(waiter.slot, stop);
      }
  }
  if (!ids.empty() && !waits_for_room.empty()) admit_waits();
}

// The worker gave up its WAIT or BARRIER (CANCEL_WAIT, a 1.13 retry, or it went away).
void StoreProxy::Core::cancel(const std::shared_ptr<Entry>& e, WorkerSession& w) {
  (void)w;
  if (e->wait_id != 0) {
    wait_table.cancel(e->wait_id);
    waits.erase(e->wait_id);
    if (wait_table.unwatch_due()) schedule_wait_flush();
    if (!waits_for_room.empty()) admit_waits();
    return;
  }
  e->waiters.clear();  // a BARRIER not yet released is never sent
}

// ----------------------------------------------------------------------------------------------
// BARRIER: its own connection (barrier_link.hpp), opened once the worker's own writes reached the
// root (a PING on the link behind them answers that).
void StoreProxy::Core::submit_barrier(const std::shared_ptr<WorkerSession>& w, Command&& cmd,
                                      std::uint64_t slot) {
  if (barrier_links >= opts.max_barrier_links) {
    ++stats.refused_requests;
    w->close(fmt::format("more than {} BARRIERs in flight through this node's proxy",
                         opts.max_barrier_links));
    return;
  }
  auto e = std::make_shared<Entry>();
  e->cmd = std::move(cmd);
  e->waiters.push_back(Waiter{w, slot, 0});
  w->blocking = e;
  if (w->last_write_seq > completed_seq()) {
    if (!open_fence || open_fence->sent) {
      open_fence = std::make_shared<Entry>();
      open_fence->cmd.op = Op::Ping;
      open_fence->cmd.word = 0x00FF0000u;
      enqueue(open_fence);
    }
    open_fence->released_by_fence.push_back(e);
    return;
  }
  release_barrier(e);
}

void StoreProxy::Core::release_barrier(const std::shared_ptr<Entry>& e) {
  if (stopped || e->waiters.empty()) return;  // cancelled meanwhile
  auto w = e->waiters.front().worker.lock();
  if (!w || w->closed() || w->blocking != e) return;
  if (barrier_links >= opts.max_barrier_links) {
    ++stats.refused_requests;
    w->close(fmt::format("more than {} BARRIERs in flight through this node's proxy",
                         opts.max_barrier_links));
    return;
  }
  w->barrier_link = std::make_shared<BarrierLink>(shared_from_this(), e);
  w->barrier_link->open();
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
  core_->accept_pause.cancel();
  if (core_->link) core_->link->close();
  core_->link.reset();
  core_->close_all("");
}

StoreProxyStats StoreProxy::stats() const { return core_->stats; }

}  // namespace ddp::rdzv::proxy
