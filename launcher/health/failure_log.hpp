// SPDX-License-Identifier: MIT
#pragma once
/// FailureLog: how each attempt's ranks failed, for /status ("failures"; docs/health.md, "Every
/// node's ranks"): the rank, how it ended, its error file's message and traceback and the last
/// lines of its stderr, kept across restarts so a viewer sees why the job restarted. Pure and
/// bounded: the last `keep` failures; a message of at most 2 KiB, a traceback's last 16 KiB,
/// 20 stderr lines of at most 512 bytes each. The text is the job's: viewers render it as text.

#include <cstddef>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ddp::launcher::health {

inline constexpr size_t kMaxFailureMessage = 2048;
inline constexpr size_t kMaxFailureTraceback = 16384;
inline constexpr size_t kMaxFailureTailLines = 20;
inline constexpr size_t kMaxFailureTailLine = 512;
inline constexpr size_t kMaxFailureCause = 512;  // bytes of the words of a failure's cause

struct RankFailure {
  int attempt = 0;
  int rank = 0;
  int local_rank = 0;
  std::string exit;  // the code, or the signal's name
  std::string message;
  std::string traceback;
  std::vector<std::string> stderr_tail;
  int node_rank = -1;  // the node's rank when it failed (a restart may renumber the nodes)
  /// Where the agent's decision puts it (the failure summary's: this node's first failure, then
  /// the job-wide root cause every node agreed on): the attempt's root cause, or a consequence of
  /// rank `cause_rank` (-1: not known on this node) of node `cause_node` (-1: not known), whose
  /// end `cause` describes ("node 1 (host-b): rank 3 (pid 42) failed with exit code 1").
  bool root_cause = false;
  int cause_node = -1;
  int cause_rank = -1;
  std::string cause;
  bool operator==(const RankFailure&) const = default;
};

/// The end of an attempt as the agent decided it (RunEnd): the node and, when it was a rank of
/// that node, the rank; its words.
struct AttemptCause {
  int node_rank = -1;
  int rank = -1;
  std::string text;
};

/// "caused_by" of a failure in /status: {"node_rank", "rank" (null: not known), "text"}, or null
/// for a root cause (or a failure no decision placed yet).
nlohmann::json failure_cause_json(const RankFailure& failure);

class FailureLog {
 public:
  explicit FailureLog(size_t keep = 16) : keep_(keep) {}
  /// Adds `failure`, cut to the bounds above (the traceback keeps its end: the raising frame).
  void add(RankFailure failure);
  /// [{"attempt", "rank", "local_rank", "exit", "message", "traceback", "stderr_tail"}...],
  /// oldest first; `dropped` counts those no longer kept.
  nlohmann::json json() const;
  long long dropped() const { return dropped_; }
  size_t size() const { return kept_.size(); }
  /// `attempt` ended for `cause`: its failure (node and rank) becomes the root cause, and every
  /// other failure of that attempt a consequence of it (a rank that failed after it, e.g. on a
  /// collective whose peer died, is no failure of its own).
  void settle(int attempt, const AttemptCause& cause);
  /// The kept failures, oldest first (the node's view record publishes the last ones).
  const std::deque<RankFailure>& kept() const { return kept_; }

 private:
  size_t keep_;
  std::deque<RankFailure> kept_;
  long long dropped_ = 0;
};

}  // namespace ddp::launcher::health
