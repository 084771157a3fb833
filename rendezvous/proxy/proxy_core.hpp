#pragma once

// The store proxy's insides, shared by its parts (not part of its interface): the requests in
// flight to the root (Entry) and the Core that routes the workers' requests onto the one link to
// the root. Its parts, one file each: WorkerSession (a worker's connection), RootLink (the link to
// the root, tagged mode), BarrierLink (a BARRIER's own connection), WaitTable (WAITs, pure).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "rendezvous/codec.hpp"
#include "rendezvous/proxy/store_proxy.hpp"
#include "rendezvous/proxy/wait_table.hpp"

namespace ddp::rdzv::proxy {

class WorkerSession;
class RootLink;

// One worker sharing a request's answer: where it goes.
struct Waiter {
  std::weak_ptr<WorkerSession> worker;
  std::uint64_t slot = 0;
  std::int64_t delta = 0;  // ADD: this worker's own delta
};

// One request to the root and every worker that shares its answer.
struct Entry {
  Command cmd;  // as sent (ADD: number is the sum of the joined ADDs)
  std::vector<Waiter> waiters;
  std::uint64_t seq = 0;  // position on the link
  std::string coalesce_key;
  bool sent = false;
  // GET/MULTI_GET out and not yet answered: identical reads arriving meanwhile gather here and
  // are sent together once it is answered.
  std::shared_ptr<Entry> held_next;
  // A fence (PING): the BARRIERs released once the root has applied everything before it.
  std::vector<std::shared_ptr<Entry>> released_by_fence;
  std::uint64_t wait_id = 0;       // a WAIT: its id in the WaitTable
  std::size_t wire_bytes() const;  // about what it takes encoded (for the link's back-pressure)
};

struct StoreProxy::Core : std::enable_shared_from_this<StoreProxy::Core> {
  Core(boost::asio::io_context& io_context, StoreProxyOptions o);

  boost::asio::io_context& io;
  StoreProxyOptions opts;
  boost::asio::ip::tcp::acceptor acceptor;
  boost::asio::steady_timer accept_pause;  // after EMFILE and the like: back off, never spin
  boost::asio::steady_timer sweep_timer;   // --idle-timeout for workers stalled mid-request
  StoreProxyStats stats;
  bool stopped = false;
  std::vector<std::weak_ptr<WorkerSession>> workers;
  // Workers not read from while the link's queue is past its bound (resumed once it drains).
  std::vector<std::weak_ptr<WorkerSession>> paused;

  std::shared_ptr<RootLink> link;  // made on the first request, again after a loss
  std::uint64_t next_seq = 1;
  std::unordered_map<std::string, std::shared_ptr<Entry>> unsent_reads;  // GET/MULTI_GET
  std::unordered_map<std::string, std::shared_ptr<Entry>> unsent_adds;
  std::unordered_map<std::string, std::shared_ptr<Entry>> inflight_reads;
  std::shared_ptr<Entry> open_fence;  // an unsent fence new BARRIERs may share
  std::size_t barrier_links = 0;      // open now

  WaitTable wait_table;
  std::unordered_map<std::uint64_t, std::shared_ptr<Entry>> waits;
  std::deque<std::shared_ptr<Entry>> waits_for_room;  // over --max-watched-keys: in line
  std::uint64_t next_wait_id = 1;
  bool wait_flush_posted = false;

  void accept();
  void arm_sweep();
  RootLink& root();
  std::uint64_t completed_seq() const;
  bool link_backlogged() const;
  void pause(const std::shared_ptr<WorkerSession>& w);
  void link_drained();

  // The workers' requests (the session decoded them and took their reply slot).
  void submit(const std::shared_ptr<WorkerSession>& w, Command&& cmd,
              std::optional<std::uint64_t> slot);
  void submit_wait(const std::shared_ptr<WorkerSession>& w, Command&& cmd, std::uint64_t slot);
  void submit_barrier(const std::shared_ptr<WorkerSession>& w, Command&& cmd, std::uint64_t slot);
  void cancel(const std::shared_ptr<Entry>& e, WorkerSession& w);
  void enqueue(const std::shared_ptr<Entry>& e);

  // The link's messages.
  void on_reply(const std::shared_ptr<Entry>& e, std::string_view reply);
  void on_event(const std::string& key, WatchEventType type);
  void on_link_lost(const RootLink& lost, const std::string& why);

  void admit_waits();
  void schedule_wait_flush();
  void flush_waits();
  void answer_waits(const std::vector<std::uint64_t>& ids);
  void release_barrier(const std::shared_ptr<Entry>& e);
  void close_all(const std::string& why);
};

// Keys ddprun keeps for its agents and the store's own handshake (/ddprun/..., /ddprun.*,
// /ddprun-auth/...): a worker naming one is refused by the proxy (it would get the shared link
// closed on a store with a token, or turned into something else).
bool is_reserved_key(std::string_view key);

}  // namespace ddp::rdzv::proxy
