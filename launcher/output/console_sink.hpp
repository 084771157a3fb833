// SPDX-License-Identifier: MIT
#pragma once
/// ConsoleSink: ddprun's stdout or stderr. Every call writes whole lines with as few write()
/// calls as the kernel allows (one, unless the terminal or pipe takes a partial write); since
/// ddprun is the only writer and single-threaded, lines of different ranks never interleave.

#include <string_view>

namespace ddp::launcher {

class ConsoleSink {
 public:
  explicit ConsoleSink(int fd);
  /// Writes all of `data` (blocking; retries EINTR, waits out EAGAIN). After EPIPE the sink
  /// drops output silently (e.g. `ddprun ... | head`).
  void write_all(std::string_view data);
  bool is_tty() const { return tty_; }
  int fd() const { return fd_; }

 private:
  int fd_;
  bool tty_ = false;
  bool broken_ = false;
};

/// write() all of `data` to `fd`, retrying EINTR/EAGAIN. Returns false on any other error.
bool write_fully(int fd, std::string_view data);

}  // namespace ddp::launcher
