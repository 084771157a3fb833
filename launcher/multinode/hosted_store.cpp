// SPDX-License-Identifier: MIT
#include "launcher/multinode/hosted_store.hpp"

#include <signal.h>

#include <boost/asio/post.hpp>
#include <future>

namespace ddp::launcher {

HostedStore::HostedStore(const rdzv::StoreServerOptions& options)
    : server_(std::make_unique<rdzv::StoreServer>(io_, options)), port_(server_->port()) {
  server_->start();
  // Signals stay with the supervision loop's signal_sets.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { io_.run(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

HostedStore::~HostedStore() {
  // stop() closes the acceptor and every session on the store's own thread; then the thread ends.
  boost::asio::post(io_, [this] {
    server_->stop();
    io_.stop();
  });
  thread_.join();
  server_.reset();
}

std::optional<rdzv::StoreServerStats> HostedStore::stats(std::chrono::milliseconds budget) {
  // Shared: a late answer still finds its promise after this call gave up.
  auto answer = std::make_shared<std::promise<rdzv::StoreServerStats>>();
  auto future = answer->get_future();
  boost::asio::post(io_, [this, answer] { answer->set_value(server_->stats()); });
  if (future.wait_for(budget) != std::future_status::ready) return std::nullopt;
  return future.get();
}

}  // namespace ddp::launcher
