// SPDX-License-Identifier: MIT
#pragma once
/// FileTimerServer: torchrun's file-based watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1), served on
/// the agent's loop instead of a thread that polls every 0.1 s. It creates the named pipe that
/// workers find in TORCHELASTIC_TIMER_FILE, reads the JSON lines PyTorch's FileTimerClient writes
/// (torch.distributed.elastic.timer.expires), keeps the deadlines in a TimerTable and wakes up at
/// the earliest one. What happens to an expired timer's pid is the owner's decision (the
/// HealthMonitor saves stacks, then signals it as torchrun would).
///
/// The server holds a write end of its own pipe open: a FIFO with no writer reads as EOF forever
/// (a busy loop), and a client's non-blocking open fails (ENXIO) when no reader has it open.

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <string>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/health/timer_table.hpp"

namespace ddp::launcher::health {

class FileTimerServer {
 public:
  struct Handlers {
    /// Every valid request (acquire or release): a sign of life of `pid`.
    std::function<void(const TimerRequest&)> on_request;
    /// Timers past their deadline, by pid; their timers are dropped from the table afterwards.
    std::function<void(const std::vector<ExpiredTimer>&)> on_expired;
    /// A line that is not a timer request (once per bad line; the server carries on).
    std::function<void(const std::string& why)> on_bad_line;
  };

  FileTimerServer(boost::asio::io_context& io, Handlers handlers);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  /// Creates the FIFO at `path` (replacing whatever is there, as torch's server does). Error: 70.
  Result<Ok> open(const std::string& path);
  const std::string& path() const { return path_; }
  /// Forgets every timer of `pid` (it exited).
  void forget(pid_t pid);
  /// Forgets every timer (a new attempt).
  void forget_all();
  size_t timers() const { return table_.size(); }
  /// Stops serving and removes the FIFO. Idempotent.
  void close();

 private:
  void arm_read();
  void read_lines();
  void schedule();
  void check_expired();

  boost::asio::posix::stream_descriptor read_end_;
  int write_end_ = -1;
  boost::asio::steady_timer deadline_timer_;
  Handlers handlers_;
  TimerTable table_;
  std::string partial_;
  bool discarding_ = false;  // inside an over-long line
  std::string path_;
};

/// Seconds since the epoch, as Python's time.time().
double epoch_seconds();

}  // namespace ddp::launcher::health
