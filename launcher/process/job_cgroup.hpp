// SPDX-License-Identifier: MIT
#pragma once
/// JobCgroup: a cgroup v2 directory that holds every process of one run's workers, so that
/// cleanup can kill them all at once with `cgroup.kill`, whatever they did to escape (setsid, a
/// cleared environment, a double fork, a nested subreaper). No process can leave a cgroup by
/// itself; only a process with write access to cgroup.procs elsewhere can move it out.
///
/// Created under ddprun's own cgroup (found through /proc/self/mountinfo and /proc/self/cgroup
/// at run time) as `ddprun-<pid>-<random>`, locked for the life of the run (run_ownership.hpp),
/// so that the next ddprun kills and removes it if this run and its orphan guard were both killed.
/// Workers enter it between fork and exec (spawn.hpp), before they can start anything.

#include <sys/types.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "launcher/process/run_ownership.hpp"

namespace ddp::launcher {

class JobCgroup {
 public:
  /// The cgroup, or why there is none (one line: cgroup v2 not mounted, not writable, no
  /// cgroup.kill in this kernel...). Removes dead runs' cgroups found next to it first.
  static std::variant<std::unique_ptr<JobCgroup>, std::string> create();
  /// Kills whatever is left and removes the directory (bounded wait).
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  const std::string& path() const { return path_; }
  /// The directory, for clone3(CLONE_INTO_CGROUP) (close-on-exec).
  int dir_fd() const { return dir_fd_; }
  /// Open for writing: a child writes "0" here to move itself in (close-on-exec).
  int procs_fd() const { return procs_fd_; }
  /// SIGKILLs every process in the cgroup (cgroup.kill). False if the write failed.
  bool kill_all() const;
  /// Live processes in the cgroup.
  std::vector<pid_t> members() const;

 private:
  JobCgroup(std::string path, int dir_fd, int procs_fd, std::unique_ptr<DirectoryLock> lock)
      : path_(std::move(path)), dir_fd_(dir_fd), procs_fd_(procs_fd), lock_(std::move(lock)) {}
  std::string path_;
  int dir_fd_;
  int procs_fd_;
  std::unique_ptr<DirectoryLock> lock_;
};

/// For the orphan guard and for reclaiming: cgroup.kill on `path`, wait (at most `wait_ms`)
/// until it is empty, rmdir. Allocation-free apart from the path; true when it is gone.
bool kill_and_remove_cgroup(const std::string& path, int wait_ms);

}  // namespace ddp::launcher
