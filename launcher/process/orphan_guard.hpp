// SPDX-License-Identifier: MIT
#pragma once
/// OrphanGuard: a tiny watchdog process that outlives ddprun only to clean up after it.
///
/// PR_SET_PDEATHSIG kills the workers when ddprun dies, but not their children, and a
/// SIGKILLed ddprun cannot clean up. The guard is forked before any worker, sits in its own
/// process group blocked on a socket, and receives a pidfd of every worker through it
/// (SCM_RIGHTS). If the socket reaches EOF without ddprun's "done" record (ddprun was killed), the
/// guard SIGKILLs, where the run has a job cgroup, everything in it (cgroup.kill: nothing escapes
/// that, not even `setsid env -i`), what is left in the workers' process groups (through their
/// pidfds, so a group number reused by an unrelated process is never hit; see
/// owned_processes.hpp), and every process whose environment carries this run's DDPRUN_JOB_TOKEN
/// (which catches daemons that left the group with setsid), then removes the scratch directory
/// unless ddprun said it is to be kept, and exits. On a normal exit ddprun sends "done". The guard
/// closes the pidfds of workers that are gone with their whole group, so it holds no more than
/// the live groups.

#include <sys/types.h>

#include <cstdint>
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

  /// Gives the guard a worker's pidfd (a duplicate travels; the caller keeps its own).
  void watch_group(int worker_pidfd);
  /// The scratch directory holds evidence now (a hang's stacks): the guard must not remove it.
  void keep_scratch();

  /// Normal shutdown: the guard exits without killing anything; reaps it.
  void release();

  pid_t pid() const { return pid_; }

 private:
  void send(int32_t record, int fd = -1);
  pid_t pid_ = -1;
  int socket_ = -1;
};

}  // namespace ddp::launcher
