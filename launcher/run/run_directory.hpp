// SPDX-License-Identifier: MIT
#pragma once
/// The on-disk layout of a run, as torchrun lays it out:
///   <log_dir>/<run_id>_<random>/attempt_<k>/<local_rank>/{stdout.log,stderr.log,error.json}
/// Without --log_dir the root is a fresh temporary directory that ddprun removes at the end
/// unless it holds log files the user asked for. A scratch root (no log files) is named
/// `ddprun-<pid>-XXXXXX` and locked for the life of the run (run_ownership.hpp), so that the next
/// ddprun removes it should this run and its orphan guard both be killed; a root that holds the
/// user's logs keeps the `ddprun_XXXXXX` name, which is never reclaimed.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/process/run_ownership.hpp"

namespace ddp::launcher {

/// The run directory's name for a job id: any byte outside [A-Za-z0-9._-] becomes '_', so an id
/// like "team/exp1" names one directory ("team_exp1_XXXXXX"), not a path below --log_dir. The
/// id itself is unchanged everywhere else (TORCHELASTIC_RUN_ID, the rendezvous keys). A name
/// longer than kRunDirNameMax bytes keeps its head and ends in '-' and 16 hex digits of a hash
/// of the whole id, so any id (a 300-byte one, 84 CJK characters) names a valid directory.
inline constexpr std::size_t kRunDirNameMax = 128;
std::string run_dir_name(const std::string& run_id);

class RunDirectory {
 public:
  /// Creates `log_dir` (if needed) and a unique run directory inside it. An empty `log_dir`
  /// means a temporary directory: under $TMPDIR (or /tmp) when it will hold log files, else on
  /// /dev/shm when that is writable (it then only holds error files, and creating and removing
  /// a tree there costs microseconds instead of milliseconds). Errors have exit code 2. Scratch
  /// roots of dead runs found in the same place are removed first.
  static Result<RunDirectory> create(const std::string& log_dir, const std::string& run_id,
                                     bool will_hold_logs);

  const std::string& path() const { return path_; }
  bool temporary() const { return temporary_; }
  std::string attempt_dir(int attempt) const;
  std::string rank_dir(int attempt, int local_rank) const;
  /// Creates attempt_<k>/<local_rank>/ for ranks 0..nproc-1.
  Result<Ok> create_attempt(int attempt, int nproc) const;
  /// The directory ddprun created for a temporary run ("" when --log_dir was given).
  const std::string& temporary_base() const { return base_; }
  /// Removes the temporary root (only when temporary()).
  void remove_if_temporary() const;

 private:
  std::string path_;
  std::string base_;  // the directory that was created for a temporary run
  bool temporary_ = false;
  std::shared_ptr<DirectoryLock> lock_;  // scratch roots: held while the run lives
};

/// Removes the scratch roots of dead runs in `parent` (see run_ownership.hpp); returns them.
std::vector<std::string> reclaim_dead_scratch(const std::string& parent);

/// A TCP port that was free on 127.0.0.1 a moment ago (bind to port 0, read it, close).
/// Racy by nature; it goes away once ddprun hosts the store on a port it keeps.
Result<int> pick_free_port();

}  // namespace ddp::launcher
