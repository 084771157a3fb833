// SPDX-License-Identifier: MIT
#pragma once
/// OutputSink: one destination of ddprun's output (its stdout or stderr, a worker's log file, the
/// --events file). Every write comes from the loop thread, in order, so lines never interleave;
/// no write ever blocks the loop, whatever the descriptor is:
///
///  * pipe or terminal: written through the sink's own non-blocking open file description of it
///    (/proc/self/fd/N; the shell's description stays blocking), flushed on writability;
///  * socket: send(MSG_DONTWAIT), flushed on writability (a dup of the socket is watched);
///  * anything else (regular files, block devices, or when the above cannot be set up): handed to
///    one background writer thread shared by all such sinks, which does the blocking write()s.
///
/// What the destination cannot take yet is queued. Past kHighWater queued bytes the sink is
/// congested(): producers (StreamPumps) stop reading the workers' pipes until when_drained() calls
/// them back, so a sink that cannot keep up slows the workers down instead of dropping output or
/// growing without bound. A write error (ENOSPC, EIO...) ends the sink: the error
/// handler gets errno and every byte that was not written; later writes are dropped. A console
/// has no handler: EPIPE there (the reader went away, `ddprun ... | head`) ends it silently.

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

class OutputSink {
 public:
  /// Above this many queued bytes the sink reports congested().
  static constexpr size_t kHighWater = 1 << 20;
  enum class Mode { NonBlocking, Socket, Thread };
  using ErrorHandler = std::function<void(int error, std::string unwritten)>;

  /// `fd` stays open and owned by the caller unless `owns_fd` (then the sink closes it once
  /// everything is written, or at its destruction).
  OutputSink(boost::asio::io_context& io, int fd, bool owns_fd = false);
  ~OutputSink();
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  /// Queues `data` (whole lines, for a console) and writes what the destination takes now.
  void write_all(std::string_view data);
  /// For a console shared by several writers (the ranks' pumps): `data` ends inside a line when
  /// `line_open` (a line over 1 MiB passed on as it comes). Such a line holds the console until
  /// its writer closes it: what other writers give meanwhile is held, in order (each stops
  /// reading while it has something held: holding()), and written after it. A line is never
  /// mixed with another writer's bytes.
  void write_lines(const void* writer, std::string_view data, bool line_open);
  /// Some of `writer`'s output waits behind another writer's open line.
  bool holding(const void* writer) const;
  /// Calls `notify` once, on the loop, when another writer's output waits behind `owner`'s open
  /// line (soon if some already does), now or once its line (held itself) owns the console.
  /// One registration per owner (a new one replaces it); dropped when its line closes.
  void when_waited_on(const void* owner, std::function<void()> notify);
  /// Calls `resume` once (on the loop) when `writer` holds nothing any more (at once if so now).
  void when_released(const void* writer, std::function<void()> resume);
  /// True while the queue is over kHighWater: producers should stop reading for a while.
  bool congested() const { return queued() >= kHighWater; }
  /// Calls `resume` once (on the loop) when the queue has drained below half of kHighWater, or
  /// when the sink fails (so that nobody waits for a dead sink).
  void when_drained(std::function<void()> resume);
  /// Called once, on the loop, when a write fails (consoles set none: EPIPE there is expected).
  void on_error(ErrorHandler handler) { on_error_ = std::move(handler); }

  /// Nothing queued and nothing being written.
  bool idle() const { return queued() == 0; }
  bool failed() const { return failed_; }
  bool is_tty() const { return tty_; }
  Mode mode() const { return mode_; }
  size_t queued() const { return pending_.size() - head_ + in_flight_; }

  /// Keeps `sink` alive until its queue is written (then closes its descriptor if it owns it):
  /// a worker's log file outlives the pump that fed it.
  static void retire(std::shared_ptr<OutputSink> sink);
  /// Runs `io` until every sink is idle, giving up after `stall` without any progress or after
  /// `limit` in all (a console nobody reads must not keep ddprun alive). Returns the bytes given
  /// up on; those sinks are abandoned (their writer thread never touches `io` again).
  static size_t drain_all(boost::asio::io_context& io, std::chrono::milliseconds stall,
                          std::chrono::milliseconds limit);

 private:
  struct Shared;  // what the writer thread and the loop share (Thread mode)
  void flush_some();
  void arm();
  void submit();
  void on_written(int error, size_t written);
  void fail(int error, std::string unwritten);
  void wake_waiters();
  void close_fd();
  ssize_t try_write(const char* data, size_t size);

  int fd_;
  bool owns_fd_;
  bool tty_ = false;
  boost::asio::io_context& io_;
  Mode mode_ = Mode::Thread;
  bool failed_ = false;
  bool closed_ = false;
  int own_fd_ = -1;  // NonBlocking: our description; Socket: a dup to watch
  std::optional<boost::asio::posix::stream_descriptor> watch_;
  std::string pending_;
  size_t head_ = 0;
  size_t in_flight_ = 0;  // Thread mode: bytes handed to the writer thread
  bool armed_ = false;
  std::vector<std::function<void()>> waiters_;
  struct Held {
    const void* writer;
    std::string data;
    bool line_open;
  };
  void flush_held();
  const void* line_owner_ = nullptr;  // whose open line holds the console
  std::vector<Held> held_;            // other writers' output meanwhile, in order
  std::vector<std::pair<const void*, std::function<void()>>> release_waiters_;
  std::vector<std::pair<const void*, std::function<void()>>> on_waited_;  // when_waited_on's
  /// Posts the console owner's when_waited_on callback when another writer waits behind it.
  void notify_waited();
  void line_closed(const void* writer);
  ErrorHandler on_error_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

/// write() all of `data` to `fd`, retrying EINTR and waiting out EAGAIN. False on other errors.
/// Only for ddprun's own messages before or without a loop (main, --store-only).
bool write_fully(int fd, std::string_view data);

}  // namespace ddp::launcher
