#pragma once

// A StoreServer on 127.0.0.1 port 0 with its io_context on a background thread, for tests.
// Log lines are captured instead of printed.

#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "rendezvous/access_policy.hpp"
#include "rendezvous/blocking_socket.hpp"
#include "rendezvous/codec.hpp"
#include "rendezvous/log.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"
#include "tests/rendezvous/frames.hpp"

namespace ddp::rdzv::test {

class TestServer {
 public:
  explicit TestServer(StoreLimits limits = {},
                      std::shared_ptr<AccessPolicy> access_policy = nullptr) {
    set_log_sink([this](std::string_view line) {
      std::lock_guard lock(log_mutex_);
      log_.emplace_back(line);
    });
    StoreServerOptions opts;
    opts.limits = limits;
    opts.access_policy = std::move(access_policy);
    server_ = std::make_unique<StoreServer>(io_, opts);
    server_->start();
    thread_ = std::thread([this] { io_.run(); });
  }

  ~TestServer() {
    boost::asio::post(io_, [this] {
      server_->stop();
      io_.stop();
    });
    thread_.join();
    server_.reset();
    set_log_sink(nullptr);
  }

  std::uint16_t port() const { return server_->port(); }

  StoreServerStats stats() {
    std::promise<StoreServerStats> p;
    boost::asio::post(io_, [&] { p.set_value(server_->stats()); });
    return p.get_future().get();
  }

  // Polls stats until `pred` holds (the server applies events asynchronously); bounded.
  template <typename Pred>
  StoreServerStats stats_when(Pred pred) {
    StoreServerStats s = stats();
    for (int i = 0; i < 500 && !pred(s); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = stats();
    }
    return s;
  }

  std::vector<std::string> log() {
    std::lock_guard lock(log_mutex_);
    return log_;
  }

  StoreClientOptions client_options() const {
    StoreClientOptions o;
    o.port = port();
    o.connect_timeout = std::chrono::seconds(10);
    o.timeout = std::chrono::seconds(20);
    return o;
  }

  // A raw connection for speaking bytes directly.
  BlockingSocket raw() const {
    return BlockingSocket::connect("127.0.0.1", port(),
                                   BlockingSocket::Clock::now() + std::chrono::seconds(5));
  }

 private:
  boost::asio::io_context io_;
  std::unique_ptr<StoreServer> server_;
  std::thread thread_;
  std::mutex log_mutex_;
  std::vector<std::string> log_;
};

inline BlockingSocket::Clock::time_point soon(int seconds = 10) {
  return BlockingSocket::Clock::now() + std::chrono::seconds(seconds);
}

// VALIDATE + PING on a raw socket, as a 2.x client does.
inline void g2_handshake(BlockingSocket& s) {
  s.send_all(encode_request(Generation::G2, make(Op::Validate, {}, {}, 0, kValidateMagic)) +
                 encode_request(Generation::G2, make(Op::Ping, {}, {}, 0, 77)),
             soon());
  if (s.recv_u32(soon()) != 77) throw std::runtime_error("bad ping echo");
}

}  // namespace ddp::rdzv::test
