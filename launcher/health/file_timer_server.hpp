// SPDX-License-Identifier: MIT
#pragma once
/// FileTimerServer: torchrun's file-based watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1), served on
/// the agent's loop instead of a thread that polls every 0.1 s. It creates the named pipe that
/// workers find in TORCHELASTIC_TIMER_FILE, reads the JSON lines PyTorch's FileTimerClient writes
/// (torch.distributed.elastic.timer.expires), keeps the deadlines in a TimerTable and wakes up at
/// the earliest one. What happens to an expired timer's pid is the owner's decision (the
/// HealthMonitor saves stacks, then signals it as torchrun would).
///
/// Workers are not trusted: a worker may flood the pipe (`yes > $TORCHELASTIC_TIMER_FILE`, or
/// valid requests as fast as it can). Each wake-up reads at most 64 KiB and then lets the loop's
/// other handlers run (a worker's exit, the store, the status port); a wake-up that hit that cap
/// waits 5 ms before the next, so a flood costs ddprun a bounded share of a core and the flooder
/// blocks on its full pipe. Bad lines are reported once, then summarised at most every 10 s (the
/// console never fills with them); at most 65536 timers are kept.
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
    /// Lines that are not timer requests: the first at once, then the count since the last
    /// report and the last reason, at most every 10 s. The server carries on.
    std::function<void(size_t count, const std::string& why)> on_bad_lines;
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
  /// Reads at most a wake-up's worth; returns whether it stopped at that cap (more may wait).
  bool read_lines();
  void handle_line(std::string_view line);
  void bad_line(std::string why);
  /// Reports the bad lines counted so far and schedules the next summary.
  void report_bad_lines();
  void schedule();
  void check_expired();

  boost::asio::posix::stream_descriptor read_end_;
  int write_end_ = -1;
  boost::asio::steady_timer deadline_timer_;
  boost::asio::steady_timer pause_timer_;   // after a wake-up that hit the cap
  boost::asio::steady_timer report_timer_;  // the next summary of bad lines
  size_t bad_lines_ = 0;                    // not reported yet
  std::string last_bad_why_;
  bool report_due_ = false;  // a summary is scheduled
  Handlers handlers_;
  TimerTable table_;
  std::string partial_;
  bool discarding_ = false;  // inside an over-long line
  std::string path_;
};

/// Seconds since the epoch, as Python's time.time().
double epoch_seconds();

}  // namespace ddp::launcher::health
