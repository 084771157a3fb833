// SPDX-License-Identifier: MIT
#pragma once
/// What happened to each worker of each attempt, and the failure summary ddprun prints at the
/// end. Pure: the Agent fills the records; formatting and error-file parsing touch nothing.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/status/exit_status.hpp"

namespace ddp::launcher {

/// PyTorch's @record error file (TORCHELASTIC_ERROR_FILE), as far as ddprun understands it.
struct ErrorFileInfo {
  std::string message;
  std::string traceback;
  std::string timestamp;
};
/// `json_text` made acceptable to a strict JSON parser without losing the rest: each byte that
/// is not part of well-formed UTF-8 (a stray 0xFF, an overlong form, an encoded surrogate, a
/// sequence cut short) and each lone surrogate escape ("\udcff", which Python's json.dump writes
/// for a surrogateescape'd file name) becomes U+FFFD. Same length or at most 3x (stays bounded).
std::string lenient_json_text(const std::string& json_text);
/// Parses the JSON text of an error file (leniently, as above); nullopt when it is not JSON or
/// has no message, and then `why` (when given) says which, in a few words.
std::optional<ErrorFileInfo> parse_error_file(const std::string& json_text,
                                              std::string* why = nullptr);

struct WorkerOutcome {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  std::optional<ExitStatus> status;   // nullopt: never started
  std::string start_error;            // why it could not start
  bool terminated_by_ddprun = false;  // ddprun signalled it before it ended
  bool oom_killed = false;            // SIGKILL while the kernel's oom_kill counter rose
  std::chrono::system_clock::time_point exit_time{};
  std::vector<std::string> stderr_tail;
  std::string error_file;
  std::optional<ErrorFileInfo> error_info;
  std::string error_file_unread;  // why an error file that exists was not read; empty if none
};

struct AttemptOutcome {
  int attempt = 0;
  std::vector<WorkerOutcome> workers;
  std::optional<size_t> root_cause;  // index into workers
  /// Why the attempt ended, one line (the RunEnd's text: "rank 3 failed with exit code 1",
  /// "node 1 (host-b): rank 3 ..."); empty when it ended well. The `summary` event's "cause".
  std::string cause;
};

struct RunSummaryInput {
  std::string program;
  std::string host;
  int max_restarts = 0;
  std::chrono::system_clock::time_point start_time{};
  std::vector<AttemptOutcome> attempts;
  int interrupted_by_signal = 0;  // ddprun itself got this signal
  int exit_code = 0;
  /// Multi-node: the job-wide root cause every node agreed on ("node 1 (host-b): rank 3 ...") or
  /// why the job ended (a lost node); empty on one node.
  std::string job_root_cause;
  /// Log files, the events file or stdout that could not be written ("<path>: <error> (...)").
  std::vector<std::string> log_errors;
  /// The hang verdict or expired watchdog timer of the last attempt and where the stacks are
  /// (docs/health.md), one line each; empty when none.
  std::vector<std::string> health_notes;
};

/// The boxed summary printed on stderr when the run failed or was interrupted.
std::string format_failure_summary(const RunSummaryInput& input);

/// An error file's timestamp (seconds since the epoch, as @record writes it) as ISO 8601 local
/// time, "2026-11-30T10:01:02+0100"; anything else as it is.
std::string format_error_time(const std::string& timestamp);

}  // namespace ddp::launcher
