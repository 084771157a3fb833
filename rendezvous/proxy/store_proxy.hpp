#pragma once

// The node-local store proxy: serves one node's workers (torch 1.13 = G1 and 2.x = G2 clients)
// on loopback and forwards to the root store over a few G2 connections, however many ranks it
// serves. Linearizable as seen by the workers; the coalescing rules and why each is safe are in
// docs/rendezvous.md ("Store proxy"):
//   * identical GET / MULTI_GET / WAIT requests not yet sent upstream share one upstream request;
//   * ADDs to one key not yet sent upstream become one ADD of the sum, each caller getting the
//     value it would have seen had the ADDs run back to back;
//   * everything else is forwarded as is, in arrival order, on one pipelined connection;
//     WAIT and BARRIER (whose replies may come late) each use a connection of their own, sent
//     only once everything their callers wrote before has been applied by the root;
//   * with a ddprun-store root, WAITs instead go on the main link itself in ddprun's tagged mode
//     (WATCH_KEY + PROBE in order with the writes, notifications told from replies by a tag; see
//     wait_table.hpp and docs/scale.md "One root connection per node"): one root connection per
//     node. A root that refuses tagged mode gets a plain main link, and the WAITs one G1 watch
//     link (older ddprun-store: G1 WATCH_KEY + PROBE) or WAIT links.
// One single-threaded boost::asio::io_context runs it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store_limits.hpp"

namespace ddp::rdzv::proxy {

struct StoreProxyOptions {
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the kernel picks one
  std::string upstream_host = "127.0.0.1";
  std::uint16_t upstream_port = 0;
  StoreLimits limits;  // applied to the workers' requests and to the root's replies
  // Connections used for WAIT/BARRIER that are kept open for reuse once answered.
  std::size_t max_idle_blocking_connections = 16;
  // Keys watched at once (each is a registration held by the root until unwatched or the link
  // closes); a WAIT that would go past it uses a WAIT link. 0: no watches at all (WAIT links,
  // and the main link does not ask for tagged mode).
  std::size_t max_watched_keys = 65536;
};

struct StoreProxyStats {
  std::size_t downstream_connections = 0;  // open now
  std::size_t downstream_requests = 0;     // requests received from workers
  std::size_t upstream_requests = 0;       // requests sent to the root (fences included)
  std::size_t upstream_connections_opened = 0;
  std::size_t coalesced_requests = 0;  // worker requests answered by another's upstream request
  std::size_t watch_waits = 0;         // WAITs answered by watches (watch link or main link)
  std::size_t tagged_main_links = 0;   // main-link connections in tagged mode (ddprun-store root)
  std::size_t unwatched_keys = 0;      // UNWATCHes sent on the tagged main link
};

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
