// SPDX-License-Identifier: MIT
#include "launcher/run/node_store_proxy.hpp"

#include <signal.h>

#include <chrono>

#include <boost/asio/post.hpp>

namespace ddp::launcher {

namespace {
rdzv::proxy::StoreProxyOptions proxy_options(const std::string& root_host, std::uint16_t root_port,
                                             std::size_t max_watched_keys) {
  rdzv::proxy::StoreProxyOptions o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  o.upstream_host = root_host;
  o.upstream_port = root_port;
  o.max_watched_keys = max_watched_keys;
  return o;
}
}  // namespace

NodeStoreProxy::NodeStoreProxy(const std::string& root_host, std::uint16_t root_port,
                               std::size_t max_watched_keys)
    : proxy_(std::make_unique<rdzv::proxy::StoreProxy>(
          io_, proxy_options(root_host, root_port, max_watched_keys))),
      port_(proxy_->port()),
      root_host_(root_host),
      root_port_(root_port) {
  proxy_->start();
  // Signals stay with the supervision loop's signal_sets.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { io_.run(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

std::optional<std::string> NodeStoreProxy::refusal() {
  if (!refusal_) {
    try {
      refusal_ = rdzv::proxy::tagged_mode_refusal(root_host_, root_port_, std::chrono::seconds(5));
    } catch (const std::runtime_error&) {
      return std::nullopt;  // unreachable now: nothing known, ask again next time
    }
  }
  return *refusal_;
}

NodeStoreProxy::~NodeStoreProxy() {
  boost::asio::post(io_, [this] {
    proxy_->stop();
    io_.stop();
  });
  thread_.join();
  proxy_.reset();
}

}  // namespace ddp::launcher
