// SPDX-License-Identifier: MIT
#include "examples/worker/progress.hpp"

#include <fmt/core.h>

#include <cstdio>

namespace ddp::examples {

ProgressReporter::ProgressReporter(bool enabled, bool terminal, int64_t line_every)
    : enabled_(enabled), terminal_(terminal), line_every_(line_every > 0 ? line_every : 1) {}

std::string ProgressReporter::bar(int64_t done, int64_t total, int width) {
  const int64_t filled = total > 0 ? done * width / total : width;
  std::string out = "[";
  for (int i = 0; i < width; ++i) out += i < filled ? '#' : '.';
  return out + "]";
}

void ProgressReporter::start_epoch(int64_t epoch, int64_t epochs, int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  last_draw_ = {};
}

void ProgressReporter::step(int64_t step, double loss, double samples_per_second) {
  if (!enabled_) return;
  if (terminal_) {
    // Redraw at most ten times a second; the last step always draws.
    const auto now = std::chrono::steady_clock::now();
    if (step != steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    fmt::print("\repoch {}/{} {} {}/{} loss {:.4f} {:.0f} samples/s\x1b[K", epoch_ + 1, epochs_,
               bar(step, steps_, 30), step, steps_, loss, samples_per_second);
    std::fflush(stdout);
  } else if (step % line_every_ == 0 || step == steps_) {
    fmt::print("epoch {}/{} step {}/{} loss {:.4f} {:.0f} samples/s\n", epoch_ + 1, epochs_, step,
               steps_, loss, samples_per_second);
    std::fflush(stdout);
  }
}

void ProgressReporter::end_epoch() {
  if (enabled_ && terminal_) {
    fmt::print("\n");
    std::fflush(stdout);
  }
}

}  // namespace ddp::examples
