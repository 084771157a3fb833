// SPDX-License-Identifier: MIT
#pragma once
/// `ddprun report`: what an --events file (docs/flags.md, docs/launcher.md) says happened, as one
/// HTML file (a timeline picture and tables) or Markdown for a ticket. Pure: text in, text out.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/common/result.hpp"

namespace ddp::launcher::view {

inline constexpr int kReportDataError = 65;   // EX_DATAERR: a line that is not an event
inline constexpr int kReportNoInput = 66;     // EX_NOINPUT: no such file, unreadable
inline constexpr int kReportCantCreate = 73;  // EX_CANTCREAT: the output cannot be written

/// The events of a file's text. A last line without its newline that does not parse is a
/// truncated write and is dropped (`truncated` says so); any other line that is not a JSON object
/// with an "event" is an error naming its line (exit 65). An empty file is an error too.
struct ParsedEvents {
  std::vector<nlohmann::json> events;
  bool truncated = false;
};
Result<ParsedEvents> parse_events_text(const std::string& text);

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
  std::vector<RankRun> runs;
  std::vector<nlohmann::json> failures;    // worker_exit not 0 and not stopped by ddprun
  std::vector<nlohmann::json> membership;  // node_lost, rescale, spare, pending, excluded
  std::vector<nlohmann::json> hangs;       // hang, stacks_saved, timer_expired, straggler
  std::vector<nlohmann::json> events;      // all, in file order
  bool truncated = false;
};

JobReport digest_events(const ParsedEvents& parsed);

std::string report_html(const JobReport& report, const std::string& source_name);
std::string report_markdown(const JobReport& report, const std::string& source_name);

}  // namespace ddp::launcher::view
