// SPDX-License-Identifier: MIT
#pragma once
/// `ddprun report`: what an --events file (docs/flags.md, docs/launcher.md) says happened, as one
/// HTML file (a timeline picture and tables) or Markdown for a ticket. Pure: lines in, text out.
///
/// Streaming and bounded: the file is read a line at a time (report_command.cpp) and digested as
/// it comes; what the report lists (events, failures, runs) keeps the first and the last
/// `kReportKeep` of each and counts the rest, so memory does not grow with the file's size.

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/exit_codes.hpp"
#include "launcher/common/result.hpp"

namespace ddp::launcher::view {

inline constexpr int kReportDataError = exit_codes::kDataError;     // a line that is not an event
inline constexpr int kReportNoInput = exit_codes::kNoInput;         // no such file, unreadable
inline constexpr int kReportCantCreate = exit_codes::kCannotWrite;  // output not writable

/// Of each list, the first and the last this many are kept.
inline constexpr size_t kReportKeep = 1000;
/// A line longer than this is not an event ddprun wrote (exit 65).
inline constexpr size_t kReportMaxLine = 16u << 20;
/// Nesting deeper than this is not an event ddprun wrote (exit 65); parsed no further.
inline constexpr int kReportMaxDepth = 64;

/// The first `keep` and the last `keep` items of a sequence, and how many were left out between.
template <typename T>
class Kept {
 public:
  explicit Kept(size_t keep = kReportKeep) : keep_(keep) {}
  void add(T item) {
    ++total_;
    if (head_.size() < keep_) return head_.push_back(std::move(item));
    tail_.push_back(std::move(item));
    if (tail_.size() > keep_) tail_.pop_front();
  }
  size_t total() const { return total_; }
  size_t size() const { return head_.size() + tail_.size(); }
  bool empty() const { return total_ == 0; }
  /// How many between the head and the tail are not kept.
  size_t left_out() const { return total_ - size(); }
  const std::vector<T>& head() const { return head_; }
  const std::deque<T>& tail() const { return tail_; }
  /// Kept items in order; `gap(n)` is called once where n were left out.
  template <typename F, typename G>
  void each(F&& f, G&& gap) const {
    for (const auto& x : head_) f(x);
    if (left_out() > 0) gap(left_out());
    for (const auto& x : tail_) f(x);
  }
  /// The i-th kept item (head, then tail).
  const T& operator[](size_t i) const {
    return i < head_.size() ? head_[i] : tail_[i - head_.size()];
  }
  /// The item added as the n-th (from 0), or nullptr when it is no longer kept.
  T* added(size_t n) {
    if (n < head_.size()) return &head_[n];
    const size_t first_in_tail = total_ - tail_.size();
    if (n >= first_in_tail && n < total_) return &tail_[n - first_in_tail];
    return nullptr;
  }

 private:
  size_t keep_;
  size_t total_ = 0;
  std::vector<T> head_;
  std::deque<T> tail_;
};

struct RankRun {
  int rank = 0;
  int local_rank = 0;
  int attempt = 0;
  long long pid = 0;
  double start = 0;
  std::optional<double> end;
  std::string exit;  // "0", "3", "SIGKILL"; "" when no worker_exit was written
  bool stopped_by_ddprun = false;
  bool oom_killed = false;
};

/// A rank's end in one attempt, as the report groups it (worker_exit, the summary's workers).
struct RankEnd {
  int rank = 0;
  std::string local_rank;  // "" when not known
  std::string exit;        // "3", "SIGTERM"; "" when no exit is in the events
  bool stopped_by_ddprun = false;
  bool oom_killed = false;
  double time = 0;        // its worker_exit's (0: none)
  std::string message;    // its error file's message, "" when none
  std::string traceback;  // its error file's traceback (the end kept), "" when none
  /// "exited with code 3", "was killed by SIGKILL", "has no exit in the events".
  std::string how() const;
};

/// What the events say about one attempt's ends: the input of group_attempts().
struct AttemptRecord {
  int attempt = 0;
  /// The rank the attempt's decision names (the summary's root_cause_rank, else the restart's
  /// failed_rank); none when the cause was no rank of this node (another node, a hang, a signal).
  std::optional<int> cause_rank;
  std::string cause;          // the attempt's end in words (summary "cause", restart's)
  std::vector<RankEnd> ends;  // the ranks that did not end well, or have a message (bounded)
  size_t ends_left_out = 0;   // not kept (a hostile number of ranks): the larger count below
  // Left out, counted per source: a rank past the bound comes from its worker_exit and again
  // from the summary's workers, and no set of its numbers is kept (that would be unbounded).
  size_t left_out_exits = 0;
  size_t left_out_summary = 0;
};

/// An attempt's failure: its root cause first, then the other ranks' ends under it.
struct AttemptFailure {
  int attempt = 0;
  std::optional<RankEnd> root;   // the root cause when it is a rank of this node
  std::string cause;             // the cause in words (the only words when `root` is empty)
  std::vector<RankEnd> stopped;  // stopped by ddprun or failed after the root cause, by rank
  size_t stopped_left_out = 0;
  /// One line: "rank 1 (local rank 1, attempt 0) exited with code 3: ValueError: bad batch".
  std::string text() const;
  /// Whom the others stopped because of: "rank 2", else the cause's words.
  std::string because() const;
};

/// The one grouping rule of the views (docs/health.md, "Root cause first"), per attempt: the
/// rank the attempt's decision names is its root cause (with no decision in the events, the
/// rank that failed on its own first, ddprun's own rule); every other rank that ddprun stopped
/// or that failed (rank_end(): Stopped or Failed) is under it, "stopped because of" it.
/// Oldest attempt first whatever the file's order; an attempt with no cause and no rank that
/// stopped or failed is no failure and is left out.
std::vector<AttemptFailure> group_attempts(const std::map<int, AttemptRecord>& attempts);

struct JobReport {
  std::string run_id;
  std::string program;
  int node_rank = 0;
  int nnodes = 1;
  int world_size = 0;
  double first_time = 0;
  double last_time = 0;
  std::optional<int> exit_code;  // from the summary
  std::string end_kind;          // the summary's "end"
  std::string root_cause;        // one line
  int attempts = 0;
  size_t event_count = 0;
  Kept<RankRun> runs;
  std::vector<AttemptFailure> attempt_failures;  // group_attempts(), oldest first (bounded)
  size_t attempt_failures_left_out = 0;          // between the first and the last kReportKeep
  Kept<nlohmann::json> failures;                 // worker_exit not 0 and not stopped by ddprun
  Kept<nlohmann::json> membership;               // node_lost, rescale, spare, pending, excluded
  Kept<nlohmann::json> hangs;                    // hang, stacks_saved, timer_expired, straggler
  Kept<nlohmann::json> events;                   // all, in file order
  std::map<int, std::pair<double, double>> attempt_spans;  // attempt -> first start, last exit
  bool truncated = false;
};

/// Digests an events file a line at a time. A line that is not a JSON object with a string
/// "event", whose known fields have the wrong type ("rank":"0", "time":null), that is nested
/// deeper than kReportMaxDepth or longer than kReportMaxLine is an error naming its line
/// (exit 65); the file's last line without its newline that does not parse is a truncated write
/// and is dropped (`truncated` says so). An empty file is an error too.
class ReportBuilder {
 public:
  /// One line (its newline removed). `unterminated`: the file's last bytes, with no newline.
  Result<Ok> add_line(std::string_view line, bool unterminated = false);
  /// A line longer than kReportMaxLine is refused once that much is read, without reading to its
  /// end.
  Error too_long();
  Result<JobReport> finish();

 private:
  Result<Ok> digest(const nlohmann::json& e);
  void note_summary(const nlohmann::json& e);
  void note_exit(const nlohmann::json& e, double t);
  void note_restart(const nlohmann::json& e);
  /// The record of `attempt`, nullptr past the bound on attempts.
  AttemptRecord* record(int attempt);
  /// `end` into `rec`: a rank already there gains what it lacked (bounded).
  /// `from_summary`: the end comes from the summary's workers (else from a worker_exit).
  void merge_end(AttemptRecord& rec, RankEnd end, bool from_summary);

  JobReport r_;
  int line_ = 0;
  bool summary_seen_ = false;
  std::string summary_cause_;
  std::map<std::pair<int, int>, size_t> open_;  // (attempt, rank) -> its run's number in runs
  std::map<int, AttemptRecord> attempts_;       // what group_attempts() groups at finish()
  size_t stored_ends_ = 0;                      // of all attempts (bounded)
  size_t stored_text_ = 0;                      // bytes of messages and tracebacks (bounded)
};

/// The whole text at once (tests): add_line for each line, then finish.
Result<JobReport> report_of_text(std::string_view text);

std::string report_html(const JobReport& report, const std::string& source_name);
std::string report_markdown(const JobReport& report, const std::string& source_name);

}  // namespace ddp::launcher::view
