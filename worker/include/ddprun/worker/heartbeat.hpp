// SPDX-License-Identifier: MIT
#pragma once
/// The progress heartbeat a worker sends to ddprun (docs/health.md, "The heartbeat"): one
/// datagram "step <N>" per training step to the Unix datagram socket named by
/// $DDPRUN_HEARTBEAT_SOCKET. It lets ddprun judge hangs by training steps rather than by output
/// lines, and fills /status, /metrics, stragglers and --no-progress-restarts with step numbers.
///
/// Sending never blocks and never fails the training: the socket is non-blocking and every send
/// is MSG_DONTWAIT. A datagram that finds ddprun's queue full is dropped silently (only a missing
/// heartbeat); the first other failure prints one line on stderr, later ones are ignored. Without
/// the variable (not under ddprun, or torchrun) it does nothing. No LibTorch.

#include <cstdint>
#include <string>

namespace ddp::worker {

class Heartbeat {
 public:
  /// Sends to $DDPRUN_HEARTBEAT_SOCKET; does nothing when it is unset or empty.
  static Heartbeat from_environment();
  /// Sends to `socket_path`; does nothing when it is empty.
  explicit Heartbeat(std::string socket_path);
  ~Heartbeat();
  Heartbeat(Heartbeat&& other) noexcept;
  Heartbeat& operator=(Heartbeat&& other) noexcept;
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// Whether heartbeats go anywhere.
  bool enabled() const { return fd_ >= 0; }
  /// One datagram "step <step>". Never blocks, never throws.
  void step(std::int64_t step);
  /// Datagrams the kernel accepted (for tests and summaries).
  std::int64_t sent() const { return sent_; }

 private:
  void failed(int error);

  std::string path_;
  int fd_ = -1;
  std::int64_t sent_ = 0;
  bool noticed_ = false;  // the one-time notice of a failure was printed
};

}  // namespace ddp::worker
