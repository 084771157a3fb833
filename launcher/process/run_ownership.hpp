// SPDX-License-Identifier: MIT
#pragma once
/// Which leftovers of other runs may be reclaimed. A run names what it leaves on shared ground
/// (its scratch directory in /dev/shm or $TMPDIR, its job cgroup) `ddprun-<pid>-<random>`, where
/// <pid> is the ddprun that created it, and holds an flock on that directory for as long as it
/// lives. The kernel drops the lock however the process dies (SIGKILL, OOM killer), so a later
/// ddprun can tell a dead run's directory from a live one's without trusting pids alone:
///
///   reclaimable = the name matches, the entry is a real directory owned by our user, nobody
///                 holds its lock, and no process <pid> exists.
///
/// The pid check covers the instant between creating the directory and locking it; a reused pid
/// only makes the check more careful (the directory waits for a later run).

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher {

/// An flock held on a directory until destruction (or the process's death).
class DirectoryLock {
 public:
  /// nullptr when the directory cannot be opened or locked.
  static std::unique_ptr<DirectoryLock> acquire(const std::string& path);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_;
};

/// "ddprun-<our pid>-" : the start of every name this process gives to what it may leave behind.
std::string owned_name_prefix();

/// The pid in a `ddprun-<pid>-<random>` name; nullopt when `name` does not have that form.
std::optional<pid_t> owner_pid_of(const std::string& name);

/// Entries of `parent` named `ddprun-<pid>-<random>` that belong to dead runs (see above).
std::vector<std::string> abandoned_entries(const std::string& parent);

}  // namespace ddp::launcher
