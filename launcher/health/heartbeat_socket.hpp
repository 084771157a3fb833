// SPDX-License-Identifier: MIT
#pragma once
/// HeartbeatSocket: one Unix datagram socket per local rank (DDPRUN_HEARTBEAT_SOCKET), served on
/// the agent's loop. Any datagram is progress; "step <N>" also carries the step number. One
/// socket per rank tells the ranks apart without trusting what a datagram says.
///
/// On readiness the socket is drained with non-blocking recv() calls (bounded per wake-up so one
/// flooding rank cannot starve the loop), so a burst costs one wake-up, not one per datagram.

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "launcher/common/result.hpp"

namespace ddp::launcher::health {

/// "step 12" -> 12; "step" with no valid number, or anything else -> nullopt (still progress).
std::optional<long long> parse_heartbeat_step(std::string_view datagram);

class HeartbeatSocket {
 public:
  /// Called for each batch of datagrams read in one wake-up: how many, and the last step number
  /// among them (nullopt if none carried one).
  using Handler = std::function<void(size_t datagrams, std::optional<long long> last_step)>;

  HeartbeatSocket(boost::asio::io_context& io, Handler handler);
  ~HeartbeatSocket();
  HeartbeatSocket(const HeartbeatSocket&) = delete;
  HeartbeatSocket& operator=(const HeartbeatSocket&) = delete;

  /// Binds `path` (an old file there is replaced) and starts serving. Error: exit 70.
  Result<Ok> open(const std::string& path);
  const std::string& path() const { return path_; }
  /// Stops serving and removes the socket file. Idempotent.
  void close();

 private:
  void arm();
  void drain();

  boost::asio::posix::stream_descriptor socket_;
  Handler handler_;
  std::string path_;
};

}  // namespace ddp::launcher::health
