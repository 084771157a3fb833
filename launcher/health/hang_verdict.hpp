// SPDX-License-Identifier: MIT
#pragma once
/// The hang verdict (--hang-timeout): the job is hung when no rank of the job, on this node or
/// (multi-node) on another one, has made progress (see ProgressTracker) for the timeout. Until
/// every live rank of the job has shown its first progress in the attempt (ProgressTracker::
/// job_started), the startup timeout applies instead: importing torch and meeting the other ranks
/// take seconds before the first line or heartbeat, and ranks that started fast block in a
/// collective, making no progress, until the slow ones join. The startup timeout also bounds that
/// grace, counted from the attempt's start: ranks that print nothing never "start", and a rank
/// that never starts must not keep the job from a verdict. Pure.

#include <chrono>
#include <optional>
#include <vector>

#include "launcher/health/progress_tracker.hpp"

namespace ddp::launcher::health {

struct HangVerdict {
  std::chrono::milliseconds idle{};  // since the job's last progress (any node)
  /// Live local ranks, the one whose last progress is oldest first (the suspects).
  std::vector<size_t> oldest_first;
  /// Not every rank of the job had shown progress: the startup grace ran out.
  bool before_all_started = false;
};

/// nullopt while some rank made progress within `timeout` (or no rank is alive).
struct HangTimeouts {
  std::chrono::milliseconds steady{0};   // --hang-timeout
  std::chrono::milliseconds startup{0};  // until every rank progressed (at most this long)
  /// The one in force at `now`: the larger of the two until the job started (every rank
  /// progressed) or the startup timeout has passed since the attempt's start; then steady.
  std::chrono::milliseconds applying(const ProgressTracker& tracker, Clock::time_point now) const;
};

std::optional<HangVerdict> judge_hang(const ProgressTracker& tracker, const HangTimeouts& timeouts,
                                      Clock::time_point now);

/// When the verdict could first be reached if nothing happens until then.
Clock::time_point next_hang_check(const ProgressTracker& tracker, const HangTimeouts& timeouts);

}  // namespace ddp::launcher::health
