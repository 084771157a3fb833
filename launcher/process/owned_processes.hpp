// SPDX-License-Identifier: MIT
#pragma once
/// Signals that reach only processes still provably ours, never whoever got a pid number later.
///
/// A pid (or a process group id) names a process only until it is reaped; after that the number
/// may belong to anyone. What ddprun may signal safely:
///   - its own children that it has not reaped (only its loop reaps, so the number cannot move
///     between looking and signalling);
///   - anything through a pidfd opened while the process was provably ours: a pidfd stays bound to
///     its process however the number is reused, and with PIDFD_SIGNAL_PROCESS_GROUP (Linux 6.9)
///     it reaches exactly the process group that process led, even after the leader was reaped
///     (a reused number starts a different group);
///   - the job cgroup (cgroup.kill, or a pidfd opened on a member and checked to be one after).
/// WorkerPidfds holds one pidfd per worker, opened right after its fork, for as long as the worker
/// or anything left in its group lives.

#include <sys/types.h>

#include <map>
#include <string>

namespace ddp::launcher {

/// pidfd_open(2); -1 (errno set) where the kernel has none (before Linux 5.3) or `pid` is gone.
int open_pidfd(pid_t pid);

/// Sends `sig` through `pidfd`: to the process (`group` false) or to every process of the group
/// the process leads (`group` true). False when none was reached (ESRCH: gone or empty; EINVAL:
/// no group signals in this kernel).
bool signal_pidfd(int pidfd, int sig, bool group);

/// True once the pidfd's process has exited (its pidfd is readable).
bool pidfd_exited(int pidfd);

/// True when the pidfd's process has exited and nothing is left in the group it led (or this
/// kernel cannot signal groups through pidfds): the pidfd is of no more use.
bool pidfd_group_gone(int pidfd);

/// The workers' pidfds, keyed by pid (which is also the worker's process group id).
class WorkerPidfds {
 public:
  WorkerPidfds() = default;
  ~WorkerPidfds();
  WorkerPidfds(const WorkerPidfds&) = delete;
  WorkerPidfds& operator=(const WorkerPidfds&) = delete;

  /// Right after the fork (the child is unreaped, so `pid` is certainly it). Replaces an entry of
  /// a long-gone worker with the same number. Returns the pidfd (-1 without pidfd support).
  int add(pid_t pid);
  /// The worker was reaped: from now on its number proves nothing.
  void reaped(pid_t pid);
  /// -1 when unknown.
  int fd_of(pid_t pid) const;

  /// A live worker's group; while its setsid() has not run yet (the group is empty), the worker
  /// itself.
  void signal_worker(pid_t pid, int sig);
  /// What is left in a (dead) worker's group; nothing when that cannot be proven ours.
  void signal_group(pid_t pid, int sig);
  /// True when `pgid` is the group of one of our workers and still has members.
  bool owns_group(pid_t pgid) const;
  /// Closes the pidfds of workers that are gone with everything in their group (bounded by the
  /// live groups, however many restarts).
  void prune();

 private:
  struct Entry {
    int fd = -1;
    bool reaped = false;
  };
  std::map<pid_t, Entry> entries_;
};

}  // namespace ddp::launcher
