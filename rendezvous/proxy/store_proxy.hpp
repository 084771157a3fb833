#pragma once

// The node-local store proxy: serves one node's workers (torch 1.13 = G1 and 2.x = G2 clients)
// on loopback and forwards to the root store over ONE connection in ddprun-store's tagged mode,
// however many ranks it serves (BARRIERs excepted: one connection each while in flight).
// Linearizable as seen by the workers; the coalescing rules and why each is safe are in
// docs/rendezvous.md ("Store proxy"), its bounds in docs/scale.md ("Store proxy bounds"):
//   * identical GET / MULTI_GET requests not yet sent upstream share one upstream request;
//   * ADDs to one key not yet sent upstream become one ADD of the sum, each caller getting the
//     value it would have seen had the ADDs run back to back;
//   * everything else is forwarded as is, in arrival order, on the one pipelined link;
//   * WAITs become WATCH_KEY + PROBE on that link, answered by the root's notifications
//     (wait_table.hpp).
// The root must be a ddprun-store that accepts tagged mode: check_root() says whether it does;
// when it does not, the workers connect to the root directly (no proxy).
// One single-threaded boost::asio::io_context runs it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store_limits.hpp"

namespace ddp::rdzv::proxy {

struct StoreProxyOptions {
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the kernel picks one
  std::string upstream_host = "127.0.0.1";
  std::uint16_t upstream_port = 0;
  // Applied to each worker connection (max_pending_output_bytes: everything owed to one worker,
  // replies held behind an unanswered WAIT included) and to the root's replies.
  StoreLimits limits;
  // Keys watched at once on the link (each a registration the root holds until unwatched or the
  // link closes). A WAIT that would go past it, once keys nobody waits on are unwatched, waits in
  // line for answered WAITs to free room; one on more distinct keys than this closes its worker.
  // Above the store's keys per request by default, so that any one WAIT fits.
  std::size_t max_watched_keys = 262144;
  // BARRIERs in flight through the proxy at once (each holds a root connection).
  std::size_t max_barrier_links = 1024;
  // Requests queued for the link and not yet written: past it the workers are not read from.
  std::size_t max_link_queue_bytes = std::size_t{64} * 1024 * 1024;
};

struct StoreProxyStats {
  std::size_t downstream_connections = 0;  // open now
  std::size_t downstream_requests = 0;     // requests received from workers
  std::size_t upstream_requests = 0;       // requests sent to the root (fences included)
  std::size_t upstream_connections_opened = 0;
  std::size_t coalesced_requests = 0;  // worker requests answered by another's upstream request
  std::size_t watch_waits = 0;         // WAITs answered through the link's watches
  std::size_t tagged_main_links = 0;   // link connections that entered tagged mode
  std::size_t unwatched_keys = 0;      // UNWATCHes sent
  std::size_t refused_requests = 0;    // worker requests refused (each closed its worker)
  std::size_t accept_errors = 0;       // failed accepts (each followed by a pause)
};

// Whether the root at host:port takes ddprun's tagged mode: nullopt when it does; else why not
// (it closed the connection, answered something else, or nothing within `timeout`). Throws
// std::runtime_error when it cannot be reached at all (nothing is known then). Blocking.
std::optional<std::string> tagged_mode_refusal(const std::string& host, std::uint16_t port,
                                               std::chrono::milliseconds timeout);

class StoreProxy {
 public:
  // Binds and listens immediately (port() is valid); throws std::runtime_error naming the address.
  StoreProxy(boost::asio::io_context& io, const StoreProxyOptions& opts);
  ~StoreProxy();
  StoreProxy(const StoreProxy&) = delete;
  StoreProxy& operator=(const StoreProxy&) = delete;

  std::uint16_t port() const;
  void start();
  void stop();  // idempotent: closes every connection
  StoreProxyStats stats() const;

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace ddp::rdzv::proxy
