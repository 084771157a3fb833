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
///
/// Each attempt gets a fresh child cgroup, `attempt-<n>`: since Linux 6.14 a cgroup that has seen
/// `cgroup.kill` SIGKILLs every child later born into it with clone3(CLONE_INTO_CGROUP) (the
/// kernel compares the parent's cgroup's kill count with the target's), so reusing one after a
/// cleanup would kill every restarted worker at birth. Workers may make cgroups of their own
/// inside; removal goes depth first.

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

  /// The run's cgroup (every attempt's is inside).
  const std::string& path() const { return path_; }
  /// The current attempt's cgroup, for clone3(CLONE_INTO_CGROUP) (close-on-exec); created on
  /// first use after next_attempt(). -1 when it cannot be created.
  int dir_fd();
  /// Open for writing: a child writes "0" here to move itself in (close-on-exec); -1 as dir_fd().
  int procs_fd();
  /// The attempt is over (nothing of it should be left): its cgroup is killed and removed, and
  /// the next worker starts in a fresh one.
  void next_attempt();
  /// Moves `pid` (a helper of the run, not a worker: the preloaded interpreter) into the child
  /// cgroup `name`, outside every attempt's, so the run's end kills it with the rest.
  bool adopt(pid_t pid, const std::string& name);
  /// SIGKILLs every process of the run (cgroup.kill on the run's cgroup). False if it failed.
  bool kill_all() const;
  /// Live processes anywhere in the run's cgroup, nested cgroups included.
  std::vector<pid_t> members() const;
  /// True when `pid` is in the run's cgroup (or one inside it).
  bool contains(pid_t pid) const;

 private:
  JobCgroup(std::string path, std::string relative, std::unique_ptr<DirectoryLock> lock)
      : path_(std::move(path)), relative_(std::move(relative)), lock_(std::move(lock)) {}
  bool open_attempt();
  void close_attempt();
  std::string path_;
  std::string relative_;  // path_ as /proc/PID/cgroup names it
  std::unique_ptr<DirectoryLock> lock_;
  int attempts_ = 0;
  std::string attempt_path_;  // "" until the attempt's first worker
  int dir_fd_ = -1;
  int procs_fd_ = -1;
};

/// For the orphan guard and for reclaiming: cgroup.kill on `path` (which kills every cgroup
/// inside it too), wait (at most `wait_ms`) until it is empty, then remove it depth first. True
/// when it is gone.
bool kill_and_remove_cgroup(const std::string& path, int wait_ms);

}  // namespace ddp::launcher
