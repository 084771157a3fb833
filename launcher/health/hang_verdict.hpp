// SPDX-License-Identifier: MIT
#pragma once
/// The hang verdict (--hang-timeout): the job is hung when no rank of the job, on this node or
/// (multi-node) on another one, has made progress (see ProgressTracker) for the timeout. Until the
/// job's first progress in an attempt the startup timeout applies instead (importing torch and
/// meeting the other ranks take seconds before the first line or heartbeat). Pure.

#include <chrono>
#include <optional>
#include <vector>

#include "launcher/health/progress_tracker.hpp"

namespace ddp::launcher::health {

struct HangVerdict {
  std::chrono::milliseconds idle{};  // since the job's last progress (any node)
  /// Live local ranks, the one whose last progress is oldest first (the suspects).
  std::vector<size_t> oldest_first;
};

/// nullopt while some rank made progress within `timeout` (or no rank is alive).
struct HangTimeouts {
  std::chrono::milliseconds steady{0};   // --hang-timeout
  std::chrono::milliseconds startup{0};  // before the attempt's first progress
  /// The one in force.
  std::chrono::milliseconds applying(const ProgressTracker& tracker) const;
};

std::optional<HangVerdict> judge_hang(const ProgressTracker& tracker, const HangTimeouts& timeouts,
                                      Clock::time_point now);

/// When the verdict could first be reached if nothing happens until then.
Clock::time_point next_hang_check(const ProgressTracker& tracker, const HangTimeouts& timeouts);

}  // namespace ddp::launcher::health
