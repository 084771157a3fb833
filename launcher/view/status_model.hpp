// SPDX-License-Identifier: MIT
#pragma once
/// StatusModel: the /status JSON (docs/health.md) as `ddprun top` reads it, and the one ordering
/// that the dashboard page and `ddprun top` share: worst ranks first (failed, then no progress
/// for a while, then stragglers, then the rest; within a level the longest silent, then the
/// slowest). Pure: parsing, rates and ordering are unit-tested without a job.

#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/common/result.hpp"

namespace ddp::launcher::view {

struct RankStatus {
  int node = 0;
  int rank = 0;
  int local_rank = 0;
  long long pid = 0;
  std::string state;  // running, exited
  std::optional<long long> step;
  std::optional<double> age_s;  // since the last progress
  bool straggler = false;
  std::string exit;                   // "" while running, else the code or the signal's name
  std::optional<double> cpu_percent;  // 100: one core busy (docs/health.md)
  std::optional<long long> rss_bytes;
  bool stopped = false;  // ddprun stopped it (another rank failed): "stopped", not "failed"
};

struct NodeStatus {
  std::string name;
  std::optional<int> node_rank;
  std::string state;  // running, lost, spare, pending, excluded
  int local_world_size = 0;
};

struct EventLine {
  double time = 0;
  std::string kind;
  std::string text;   // one line, for the terminal
  long long seq = 0;  // the server's number for it (0: none)
};

/// How a rank ended, as every view draws it (docs/health.md, "Root cause first"): not ended (or
/// no exit known), ended well (exit 0), stopped (ddprun stopped it because another rank failed:
/// never drawn as a failure, whatever its exit) or failed on its own. The one rule `top`, the
/// report and the dashboard's severity() follow.
enum class RankEndKind { None, Ok, Stopped, Failed };
/// `exit`: "" (no exit), "0", a code or a signal's name.
RankEndKind rank_end(const std::string& exit, bool stopped_by_ddprun);

/// A rank that failed, a hang, a lost node, a stopped job: what `top` keeps on screen across
/// restarts (the ranks it names are gone by then).
bool is_failure_event(const nlohmann::json& event);

struct StatusModel {
  std::string run_id;
  std::string state;  // the job's (running, re-forming, hung, ...)
  std::string phase;  // this agent's
  int attempt = 0;
  int world_size = 0;
  int node_rank = 0;
  int num_nodes = 1;
  std::string host;
  double hang_timeout_s = 0;
  std::vector<NodeStatus> nodes;
  std::vector<RankStatus> ranks;    // this node's, then the other nodes' as they published them
  bool job_wide = false;            // the server lists every node's ranks ("job_nodes")
  std::vector<EventLine> events;    // oldest first
  std::vector<EventLine> failures;  // those of `events` that is_failure_event, oldest first
  std::optional<int> exit_code;     // the job's, once it ended
  std::string root_cause;           // one line, once it ended (may be empty)
  /// The job ended ("succeeded" or "failed"): the endpoint serves the final state a while.
  bool ended() const { return state == "succeeded" || state == "failed"; }
};

/// Error (exit 70 is never used): a one-line reason, exit 69 (the endpoint answered junk).
Result<StatusModel> parse_status(const std::string& json_text);

/// `key` of `j` as text: a string as it is, anything else as JSON, "" when missing or null.
std::string field_text(const nlohmann::json& j, const char* key);

/// One line describing an --events object (the dashboard's page has the same words).
std::string describe_event(const nlohmann::json& event);

/// Steps per second from successive polls, kept per rank (bounded).
class RateHistory {
 public:
  explicit RateHistory(size_t keep = 120) : keep_(keep) {}
  void note(const StatusModel& model, double now_s);
  std::optional<double> rate(int node, int rank) const;            // over the last ~10 samples
  std::vector<double> recent(int node, int rank, size_t n) const;  // newest last

 private:
  size_t keep_;
  std::map<std::pair<int, int>, std::deque<std::pair<double, long long>>> samples_;
};

/// 4 failed, 3 no progress for long, 2 straggler, 1 running or ended well.
int severity(const RankStatus& r, double hang_timeout_s);
/// Worst first (see above); ties by rank.
std::vector<RankStatus> worst_first(std::vector<RankStatus> ranks, const RateHistory& rates,
                                    double hang_timeout_s);

}  // namespace ddp::launcher::view
