#pragma once

// A standby's connection to its primary: subscribes (G2 handshake, the job's token through
// `after_connect` when it has one, GET kFollowKey; all on a BlockingSocket within 30 s), then reads
// the primary's frames on the io_context, hands each mutation, in sequence order, to `apply` and
// acknowledges what it applied. A gap in the sequence or a malformed frame ends following (logged).
// When the link is lost the standby keeps the state it has: it never resubscribes (a restarted,
// empty primary must not wipe it) and waits to be promoted.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/blocking_socket.hpp"
#include "rendezvous/replication.hpp"

namespace ddp::rdzv {

class StoreFollower : public std::enable_shared_from_this<StoreFollower> {
 public:
  using Apply = std::function<void(Command&&)>;
  using AfterConnect = std::function<void(BlockingSocket&, BlockingSocket::Clock::time_point)>;

  StoreFollower(boost::asio::io_context& io, std::string primary, const StoreLimits& limits,
                AfterConnect after_connect, Apply apply);

  // Blocking: connect, handshake, after_connect (the token), subscribe, all within 30 s. Throws
  // std::runtime_error("cannot follow H:P: ...") with the reason, a refused token included.
  void connect();
  void start();  // read frames asynchronously
  // Apply every frame already received (promotion must not lose what the kernel holds for us).
  void drain();
  // Promotion: tell the old primary (best effort) that `epoch` now rules, then stop following.
  void fence(std::int64_t epoch);
  void stop();

  std::uint64_t last_sequence() const { return last_sequence_; }
  // The primary dropped this standby (kDroppedKey): why, empty while it was not dropped.
  const std::string& dropped_because() const { return dropped_because_; }
  std::int64_t primary_epoch() const { return primary_epoch_; }

 private:
  void read_more();
  // Acknowledge what was applied (the primary holds its clients' replies until then): one ack in
  // flight at a time, the latest sequence sent when the socket takes it.
  void acknowledge();
  void write_pending();
  // Parse and apply buffered frames; false when following ended (gap or malformed frame).
  bool apply_buffered();
  void lost(const std::string& why);

  boost::asio::ip::tcp::socket socket_;
  std::string primary_;
  AfterConnect after_connect_;
  ReplicationFrameParser parser_;
  Apply apply_;
  std::uint64_t last_sequence_ = 0;
  std::uint64_t acknowledged_ = 0;  // the last sequence put into out_
  std::string out_;                 // to the primary, not yet taken by the socket, from out_off_
  std::size_t out_off_ = 0;
  std::int64_t primary_epoch_ = 0;
  bool following_ = false;
  std::string dropped_because_;
  char buf_[64 * 1024];
};

}  // namespace ddp::rdzv
