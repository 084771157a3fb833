#pragma once

// A c10d-compatible TCPStore server on one single-threaded boost::asio::io_context. Serves torch
// 1.13 (G1) and torch 2.x (G2) clients on one key space; see docs/rendezvous.md.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store_limits.hpp"
#include "rendezvous/store_stats.hpp"

namespace ddp::rdzv {

class AccessPolicy;  // rendezvous/access_policy.hpp

struct StoreServerOptions {
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the kernel picks a free port, held from bind on
  StoreLimits limits;
  bool trace = false;  // log every request (opcode, keys, sizes): for protocol debugging only
  std::shared_ptr<AccessPolicy> access_policy;  // none: every client may touch every key
};

// Listening failed; what() names address:port and the OS reason.
class StoreBindError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StoreServer {
 public:
  // Binds and listens immediately (so port() is valid and held); throws StoreBindError.
  StoreServer(boost::asio::io_context& io, const StoreServerOptions& opts);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  std::uint16_t port() const;
  void start();  // begin accepting on the io_context
  void stop();   // close the acceptor and every connection; idempotent

  // Must be called from the io_context's thread (or while it is not running).
  StoreServerStats stats() const;

  struct Core;  // shared with the connections; defined in store_server.cpp

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace ddp::rdzv
