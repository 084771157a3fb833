// SPDX-License-Identifier: MIT
#pragma once
/// NodeStoreProxy: this node's store proxy (rendezvous/proxy) for its workers, on a thread and
/// io_context of its own like HostedStore, so the supervision loop never delays the workers'
/// store traffic. Listens on 127.0.0.1; the workers get that address as MASTER_ADDR:MASTER_PORT.

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "rendezvous/proxy/store_proxy.hpp"

namespace ddp::launcher {

class NodeStoreProxy {
 public:
  /// Listens at once (port() is valid); throws std::runtime_error when it cannot.
  /// max_watched_keys: StoreProxyOptions::max_watched_keys (--store-proxy-max-watched-keys).
  NodeStoreProxy(const std::string& root_host, std::uint16_t root_port,
                 std::size_t max_watched_keys);
  /// Closes every connection and joins the thread.
  ~NodeStoreProxy();
  NodeStoreProxy(const NodeStoreProxy&) = delete;
  NodeStoreProxy& operator=(const NodeStoreProxy&) = delete;

  std::uint16_t port() const { return port_; }
  /// The store it forwards to.
  const std::string& root_host() const { return root_host_; }
  std::uint16_t root_port() const { return root_port_; }
  /// Why the workers should connect to the root directly: it does not take ddprun's tagged mode
  /// (not a ddprun-store). nullopt: they go through this proxy. Asked of the root once, on the
  /// first call (blocking, up to a few seconds), then remembered.
  std::optional<std::string> refusal();

 private:
  boost::asio::io_context io_{1};
  std::unique_ptr<rdzv::proxy::StoreProxy> proxy_;
  std::uint16_t port_ = 0;
  std::string root_host_;
  std::uint16_t root_port_ = 0;
  std::optional<std::optional<std::string>> refusal_;  // outer: asked already
  std::thread thread_;
};

}  // namespace ddp::launcher
