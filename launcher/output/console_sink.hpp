// SPDX-License-Identifier: MIT
#pragma once
/// ConsoleSink: ddprun's stdout or stderr. Every worker line, every ddprun message and the
/// summary go through it, in order, from the single loop thread, so lines of different ranks never
/// interleave and no line is torn by another writer.
///
/// When the console is a pipe or a terminal, the sink writes through its own non-blocking open
/// file description of it (/proc/self/fd/N; the shell's description stays blocking) and queues
/// what the reader cannot take yet, flushing on writability from the Asio loop. So a console that
/// stops reading (a pager, Ctrl-S) never blocks supervision: exits, signals and timers are still
/// handled, and the StreamPumps stop reading worker pipes while the queue is over its high-water
/// mark (the workers then block on their own full pipes, as they would on the console). For
/// regular files, or when reopening fails, it writes blocking, which cannot stall for long.

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

class ConsoleSink {
 public:
  /// Above this many queued bytes the sink reports congested().
  static constexpr size_t kHighWater = 1 << 20;

  ConsoleSink(boost::asio::io_context& io, int fd);
  ~ConsoleSink();
  ConsoleSink(const ConsoleSink&) = delete;
  ConsoleSink& operator=(const ConsoleSink&) = delete;

  /// Writes `data` (whole lines) now, or queues what cannot be written yet. After EPIPE the sink
  /// drops output silently (e.g. `ddprun ... | head`).
  void write_all(std::string_view data);
  /// True while the queue is over kHighWater: producers should stop reading for a while.
  bool congested() const { return queued() >= kHighWater; }
  /// Calls `resume` once (on the loop) when the queue has drained below half of kHighWater.
  void when_drained(std::function<void()> resume);
  /// Writes everything queued, waiting as long as the console needs (at the end of a run).
  void flush_blocking();

  bool is_tty() const { return tty_; }
  bool non_blocking() const { return async_.has_value(); }

 private:
  size_t queued() const { return queue_.size() - head_; }
  void flush_some();
  void arm();
  void wake_waiters();

  int fd_;
  bool tty_ = false;
  bool broken_ = false;
  std::optional<boost::asio::posix::stream_descriptor> async_;
  std::string queue_;
  size_t head_ = 0;
  bool armed_ = false;
  std::vector<std::function<void()>> waiters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

/// write() all of `data` to `fd`, retrying EINTR and waiting out EAGAIN. False on other errors.
bool write_fully(int fd, std::string_view data);

}  // namespace ddp::launcher
