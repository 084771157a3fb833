// SPDX-License-Identifier: MIT
#pragma once
/// HostedStore: the job's TCP store (rendezvous::StoreServer) served by this agent on a thread of
/// its own, with its own io_context. Nothing the supervision loop does (a slow console, a long
/// end of attempt) can then keep the other nodes and the workers from their store; the store
/// touches nothing of the Agent's.

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>

#include "rendezvous/store_server.hpp"

namespace ddp::launcher {

class HostedStore {
 public:
  /// Binds and listens at once (port() is valid and held); throws rdzv::StoreBindError.
  explicit HostedStore(const rdzv::StoreServerOptions& options);
  /// Stops serving and joins the thread.
  ~HostedStore();
  HostedStore(const HostedStore&) = delete;
  HostedStore& operator=(const HostedStore&) = delete;

  std::uint16_t port() const { return port_; }
  /// The server's counters (for /metrics), read on the store's own thread; nullopt when that
  /// thread does not answer within `budget` (the caller's loop must not wait on a busy store).
  std::optional<rdzv::StoreServerStats> stats(std::chrono::milliseconds budget);

 private:
  boost::asio::io_context io_{1};
  std::unique_ptr<rdzv::StoreServer> server_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace ddp::launcher
