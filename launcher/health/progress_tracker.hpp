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
///
/// Multi-node: progress of another node's ranks (seen through the store, at the moment this agent
/// noticed it: no other host's clock is involved) counts as progress of the job, so that the
/// verdict is job-wide: a node whose ranks print nothing is not hung while another node's ranks
/// progress.
///
/// Started: a local rank has started once it showed its first progress in the attempt, of the
/// best source that local rank showed in the attempt before (any source in a first attempt, or
/// when it showed none): a rank that sent heartbeats last time has started at its first
/// heartbeat, not at torch's own warning from init_process_group, which an exec'd rank prints
/// before its longest quiet phase (importing torch._dynamo on the optimizer's construction, 20+ s
/// on a loaded machine; seed 36 in docs/reliability.md). The other nodes' ranks have started once
/// every other node said so in its published progress (rdzv::NodeProgress::all_started; a node
/// too old to say counts as started on its first progress). The startup timeout of the hang
/// verdict lasts until the whole job started.

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
    /// The best source this local rank showed in the attempt before (nullopt: none, or the first
    /// attempt): the source its first progress must have for the rank to count as started.
    std::optional<ProgressSource> expected;
  };

  /// A new attempt: one entry per local rank (its global rank), all starting now. `other_nodes`:
  /// the job has ranks on other nodes too (they have not started until record_elsewhere says so).
  /// Each local rank keeps, as what its start must show, the best source it showed in the attempt
  /// that ends here.
  void start_attempt(const std::vector<int>& global_ranks, Clock::time_point now,
                     bool other_nodes = false);
  void record(size_t local_rank, ProgressSource source, Clock::time_point now,
              std::optional<long long> step = std::nullopt);
  void record_exit(size_t local_rank, Clock::time_point now);
  /// Another node's ranks progressed (noticed `now`); `best_step`: the highest step any other node
  /// reported in this attempt (nullopt: none); `others_started`: every other node said all its
  /// ranks have started.
  void record_elsewhere(Clock::time_point now, std::optional<long long> best_step,
                        bool others_started = true);

  /// The best source seen in this attempt (nullopt: none yet).
  std::optional<ProgressSource> active_source() const;
  /// When the rank last made progress by the active source (its start or exit count too).
  Clock::time_point last_progress(size_t local_rank) const;
  /// The latest progress of any rank of the job (here, or elsewhere as noticed here).
  Clock::time_point job_last_progress() const;
  /// Whether any rank of the job made progress in this attempt (the start and exits aside).
  bool job_progressed() const { return active_source() || elsewhere_; }
  /// When this attempt started.
  Clock::time_point attempt_start() const { return attempt_start_; }
  /// Whether every live local rank showed progress in this attempt (exited ones aside).
  bool local_ranks_started() const;
  /// Whether every live rank of the job showed progress, as far as this node knows: its own
  /// ranks, and every other node by its published flag.
  bool job_started() const { return others_started_ && local_ranks_started(); }
  /// The highest step any local rank reached in this attempt (nullopt: no step numbers).
  std::optional<long long> best_step() const;
  /// The same over every node of the job (local ranks and what the other nodes reported).
  std::optional<long long> job_best_step() const;
  /// When progress elsewhere was last noticed (nullopt: never in this attempt).
  std::optional<Clock::time_point> last_progress_elsewhere() const { return elsewhere_; }
  /// Local ranks still alive, the one whose last progress is oldest first.
  std::vector<size_t> alive_by_oldest_progress() const;

  const std::vector<Rank>& ranks() const { return ranks_; }

 private:
  /// The best source a rank showed (nullopt: none).
  static std::optional<ProgressSource> best_of(const Rank& r);

  std::vector<Rank> ranks_;
  bool seen_[3] = {false, false, false};
  std::optional<Clock::time_point> elsewhere_;
  std::optional<long long> elsewhere_best_step_;
  Clock::time_point attempt_start_{};
  bool others_started_ = true;
};

}  // namespace ddp::launcher::health
