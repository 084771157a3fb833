#include "rendezvous/proxy/barrier_link.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/proxy/worker_session.hpp"

namespace ddp::rdzv::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

BarrierLink::BarrierLink(std::shared_ptr<StoreProxy::Core> core, std::shared_ptr<Entry> entry)
    : core_(std::move(core)), entry_(std::move(entry)), socket_(core_->io) {
  ++core_->barrier_links;
  ++core_->stats.upstream_connections_opened;
}

BarrierLink::~BarrierLink() { --core_->barrier_links; }

void BarrierLink::open() {
  request_ = encode_request(Generation::G2, Command{Op::Validate, {}, {}, 0, kValidateMagic}) +
             encode_request(Generation::G2, entry_->cmd);
  ++core_->stats.upstream_requests;
  tcp::resolver resolver(core_->io);
  boost::system::error_code ec;
  auto endpoints =
      resolver.resolve(core_->opts.upstream_host, std::to_string(core_->opts.upstream_port), ec);
  if (ec) return fail("cannot resolve the root store: " + ec.message());
  asio::async_connect(
      socket_, endpoints,
      [self = shared_from_this()](const boost::system::error_code& cec, const tcp::endpoint&) {
        if (self->closed_) return;
        if (cec) return self->fail("cannot reach the root store for a BARRIER: " + cec.message());
        boost::system::error_code ignored;
        self->socket_.set_option(tcp::no_delay(true), ignored);
        // The one write on this socket.
        asio::async_write(self->socket_, asio::buffer(self->request_),
                          [self](const boost::system::error_code& wec, std::size_t) {
                            if (wec) self->fail("root store connection lost: " + wec.message());
                          });
        asio::async_read(self->socket_, asio::buffer(self->byte_),
                         [self](const boost::system::error_code& rec, std::size_t) {
                           if (self->closed_) return;
                           if (rec)
                             return self->fail("root store connection lost: " + rec.message());
                           const auto waiters = self->entry_->waiters;  // answering may cancel
                           const auto e = self->entry_;
                           self->close();
                           for (const auto& w : waiters)
                             if (auto worker = w.worker.lock()) {
                               if (worker->blocking == e) worker->blocking_done();
                               worker->fill(w.slot, std::string_view(self->byte_.data(), 1));
                             }
                         });
      });
}

void BarrierLink::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  socket_.close(ec);
}

void BarrierLink::fail(const std::string& why) {
  if (closed_) return;
  close();
  const auto waiters = entry_->waiters;  // closing a worker cancels its BARRIER (clears them)
  for (const auto& w : waiters)
    if (auto worker = w.worker.lock()) worker->close(why);
}

}  // namespace ddp::rdzv::proxy
