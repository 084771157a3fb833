// SPDX-License-Identifier: MIT
#include "launcher/run/hosted_store.hpp"

#include <signal.h>

#include <boost/asio/post.hpp>

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

}  // namespace ddp::launcher
