#pragma once

// A BARRIER's own connection to the root: the root answers a BARRIER only once every party
// arrived, so it cannot wait in line on the shared link. One per worker's BARRIER, at most
// StoreProxyOptions::max_barrier_links open at once on the node; closed when answered or when
// its worker goes (the root then forgets the registration with the connection).

#include <array>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/proxy/proxy_core.hpp"

namespace ddp::rdzv::proxy {

class BarrierLink : public std::enable_shared_from_this<BarrierLink> {
 public:
  BarrierLink(std::shared_ptr<StoreProxy::Core> core, std::shared_ptr<Entry> entry);
  ~BarrierLink();
  void open();
  void close();

 private:
  void fail(const std::string& why);

  std::shared_ptr<StoreProxy::Core> core_;
  std::shared_ptr<Entry> entry_;
  boost::asio::ip::tcp::socket socket_;
  std::string request_;
  std::array<char, 1> byte_{};
  bool closed_ = false;
};

}  // namespace ddp::rdzv::proxy
