// SPDX-License-Identifier: MIT
#pragma once
/// ProgressTracker: when each local rank of the current attempt last made progress. Pure: the
/// HealthMonitor reports events with the time they happened (tests pass a fake clock).
///
/// Progress has three sources, in this order of trust: a heartbeat datagram, a new output line,
/// a watchdog timer request. Once a job has sent one event of a source, only that source and
/// better ones count from then on in this attempt: a job that sends heartbeats is judged by its
/// heartbeats (its log lines may come from a thread that runs on while the training loop is
/// stuck); a job that only logs is judged by its lines. The start of the attempt and a rank's exit
/// count as progress of that rank.

#include <chrono>
#include <optional>
#include <vector>

namespace ddp::launcher::health {

using Clock = std::chrono::steady_clock;

enum class ProgressSource { Heartbeat = 0, Output = 1, Timer = 2 };
const char* source_name(ProgressSource source);

class ProgressTracker {
 public:
  struct Rank {
    int rank = 0;  // global rank
    bool alive = true;
    Clock::time_point started{};
    std::optional<Clock::time_point> last[3];  // by ProgressSource
    std::optional<Clock::time_point> exited;
    std::optional<long long> step;       // the last step number a heartbeat carried
    std::optional<long long> best_step;  // the highest
    long long heartbeats = 0;
  };

  /// A new attempt: one entry per local rank (its global rank), all starting now.
  void start_attempt(const std::vector<int>& global_ranks, Clock::time_point now);
  void record(size_t local_rank, ProgressSource source, Clock::time_point now,
              std::optional<long long> step = std::nullopt);
  void record_exit(size_t local_rank, Clock::time_point now);

  /// The best source seen in this attempt (nullopt: none yet).
  std::optional<ProgressSource> active_source() const;
  /// When the rank last made progress by the active source (its start or exit count too).
  Clock::time_point last_progress(size_t local_rank) const;
  /// The latest progress of any rank.
  Clock::time_point job_last_progress() const;
  /// The highest step any rank reached in this attempt (nullopt: no step numbers).
  std::optional<long long> best_step() const;
  /// Local ranks still alive, the one whose last progress is oldest first.
  std::vector<size_t> alive_by_oldest_progress() const;

  const std::vector<Rank>& ranks() const { return ranks_; }

 private:
  std::vector<Rank> ranks_;
  bool seen_[3] = {false, false, false};
};

}  // namespace ddp::launcher::health
