// SPDX-License-Identifier: MIT
#pragma once
/// Rank 0's training progress: a redrawn bar when stdout is a terminal, plain lines (every
/// `line_every` steps) when it is a pipe or a log file, as under ddprun's log redirection.

#include <chrono>
#include <cstdint>
#include <string>

namespace ddp::examples {

class ProgressReporter {
 public:
  /// `enabled` false makes every call a no-op (ranks other than 0).
  ProgressReporter(bool enabled, bool terminal, int64_t line_every = 100);

  void start_epoch(int64_t epoch, int64_t epochs, int64_t steps);
  /// `samples_per_second` counts all ranks together.
  void step(int64_t step, double loss, double samples_per_second);
  void end_epoch();

  /// Formats a bar "[#####.....]" of `width` cells for done/total.
  static std::string bar(int64_t done, int64_t total, int width);

 private:
  bool enabled_;
  bool terminal_;
  int64_t line_every_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace ddp::examples
