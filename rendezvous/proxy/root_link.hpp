#pragma once

// The store proxy's one connection to the root, in ddprun-store's tagged mode (docs/protocol.md,
// TAGGED): VALIDATE and TAGGED first, nothing else until the root accepted; then every request
// of the node's workers, pipelined in order, with the WATCH_KEY / PROBE / UNWATCH of their WAITs
// between them, and the root's replies and notifications told apart by their tag. One write at a
// time; what is queued meanwhile goes in the next. Failure (the root went away, refused tagged
// mode, or sent bytes a ddprun-store would not) is reported once to the Core, which closes the
// workers as the root itself going away would.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "rendezvous/proxy/proxy_core.hpp"

namespace ddp::rdzv::proxy {

class RootLink : public std::enable_shared_from_this<RootLink> {
 public:
  static constexpr std::chrono::seconds kTaggedTimeout{10};

  explicit RootLink(std::shared_ptr<StoreProxy::Core> core);
  void open();
  // Sent at the end of this turn, after everything enqueued before.
  void enqueue(std::shared_ptr<Entry> e);
  void close();
  // Every request up to this sequence was applied by the root (a later reply arrived).
  std::uint64_t completed_seq() const { return completed_seq_; }
  // Bytes queued and not yet written: past StoreProxyOptions::max_link_queue_bytes the workers
  // are not read from.
  std::size_t queued_bytes() const { return unsent_bytes_ + writing_.size(); }

 private:
  enum class State { Connecting, Negotiating, Ready, Closed };
  void schedule_flush();
  void flush();
  void write(std::string bytes);
  void read();
  void parse();
  void take_reply(std::string_view reply);
  void fail(const std::string& why);

  std::shared_ptr<StoreProxy::Core> core_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  State state_ = State::Connecting;
  std::vector<std::shared_ptr<Entry>> unsent_;
  std::size_t unsent_bytes_ = 0;
  std::deque<std::shared_ptr<Entry>> inflight_;  // answered in this order
  std::string writing_;
  bool flush_posted_ = false;
  std::string in_;
  std::unique_ptr<char[]> read_buf_;
  std::uint64_t completed_seq_ = 0;
};

}  // namespace ddp::rdzv::proxy
