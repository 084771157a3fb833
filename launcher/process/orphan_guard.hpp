// SPDX-License-Identifier: MIT
#pragma once
/// OrphanGuard: a tiny watchdog process that outlives ddprun only to clean up after it.
///
/// PR_SET_PDEATHSIG kills the workers when ddprun dies, but not their children, and a
/// SIGKILLed ddprun cannot clean up. The guard is forked before any worker, sits in its own
/// process group blocked on a pipe, and learns every worker process group through it. If the
/// pipe reaches EOF without ddprun's "done" record (ddprun was killed), the guard SIGKILLs those
/// groups and every process whose environment carries this run's DDPRUN_JOB_TOKEN (which catches
/// daemons that left the group with setsid), and, where the run has a job cgroup, everything in it
/// (cgroup.kill: nothing escapes that, not even `setsid env -i`), then exits. On a normal exit
/// ddprun sends "done".

#include <sys/types.h>

#include <string>

namespace ddp::launcher {

class OrphanGuard {
 public:
  /// Name of the environment variable that marks every process of this run.
  static constexpr const char* kTokenVariable = "DDPRUN_JOB_TOKEN";

  OrphanGuard() = default;
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;
  ~OrphanGuard();

  /// Forks the guard. `token` must be unique to this run. `scratch_dir`, if not empty, is a
  /// temporary directory of ddprun's that the guard removes when ddprun dies without cleaning up.
  /// Returns false if it could not start (ddprun then runs without it, and says so).
  /// `cgroup_dir`, if not empty, is the run's job cgroup, killed and removed in that case too.
  bool start(const std::string& token, const std::string& scratch_dir = {},
             const std::string& cgroup_dir = {});

  /// Tells the guard about a worker's process group.
  void watch_group(pid_t pgid);

  /// Normal shutdown: the guard exits without killing anything; reaps it.
  void release();

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int write_fd_ = -1;
};

}  // namespace ddp::launcher
