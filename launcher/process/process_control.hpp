// SPDX-License-Identifier: MIT
#pragma once
/// ProcessControl: the seam between the Agent and the kernel (style R2). The Agent only decides;
/// everything that forks, reaps, lists or signals processes goes through this interface.
/// PosixProcessControl is the real one; tests use a scripted fake (tests/launcher/unit).
///
/// Exit notifications are not part of the interface: the Agent reaps on SIGCHLD, and a fake
/// raises SIGCHLD itself after queueing the statuses that reap_exited() will return.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/process/job_cgroup.hpp"
#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/owned_processes.hpp"
#include "launcher/process/process_table.hpp"
#include "launcher/process/spawn.hpp"
#include "launcher/process/zygote_starter.hpp"

namespace ddp::launcher {

class ProcessControl {
 public:
  virtual ~ProcessControl() = default;

  /// Before the first worker: become the subreaper, start the orphan guard (with this token, and
  /// a temporary directory to remove if ddprun is killed; may be empty). Returns warnings (one
  /// line each) for what could not be set up.
  virtual std::vector<std::string> begin_supervision(const std::string& token,
                                                     const std::string& scratch_dir) = 0;
  /// After the last worker and leftover are gone: release the guard.
  virtual void end_supervision() = 0;
  /// Every worker and leftover of this attempt is gone; the next attempt starts afresh (its own
  /// job cgroup, see job_cgroup.hpp).
  virtual void end_attempt() {}
  /// The temporary run directory holds evidence now (stacks): not to be removed, even by the
  /// orphan guard if ddprun is killed.
  virtual void keep_scratch() {}

  /// Forks a worker (see spawn.hpp); await_exec() confirms its exec.
  virtual Result<StartedProcess> start(const SpawnRequest& request) = 0;
  virtual Result<pid_t> await_exec(const StartedProcess& started,
                                   const std::string& executable) = 0;
  /// Registers a worker's process group with the orphan guard (`pgid`: the worker's pid).
  virtual void watch_group(pid_t pgid) = 0;

  /// Every child that has exited since the last call (workers, orphans, the guard).
  virtual std::vector<ReapedChild> reap_exited() = 0;
  /// Live children other than the guard, and anything else still in the job's cgroup: after all
  /// workers are reaped, the leftovers.
  virtual std::vector<pid_t> live_children() = 0;

  // Signals reach only what is provably still the run's (owned_processes.hpp): a group or a pid
  // whose number was reused by an unrelated process after ours was reaped is left alone.
  /// Signals a live worker's group (falls back to the pid while the group does not exist yet).
  virtual void signal_worker(pid_t pgid, int sig) = 0;
  /// Signals what a dead worker left in its group (nothing when that is gone).
  virtual void signal_group(pid_t pgid, int sig) = 0;
  /// Signals one process if it is still the run's: ddprun's unreaped child, a member of the job
  /// cgroup or of a worker's live group.
  virtual void signal_process(pid_t pid, int sig) = 0;
  /// SIGKILLs every process of the run that is left, in one step where the platform allows it
  /// (the job cgroup's cgroup.kill); nothing more to do elsewhere.
  virtual void kill_job() {}

  /// --preload, after begin_supervision(): starts the preloaded interpreter's imports (zygote.hpp)
  /// without waiting. The descriptor turns readable when it has answered (then finish_preload());
  /// a string is the one-line reason it cannot be used (start() then execs as before).
  virtual std::variant<int, std::string> begin_preload(const ZygoteSetup&) {
    return std::string("not supported by this process control");
  }
  /// After begin_preload()'s descriptor turned readable, or with `give_up` (its timeout, a
  /// signal): ready (from now on start() forks the workers it can), or why not.
  virtual std::variant<ZygoteReady, std::string> finish_preload(
      const std::optional<std::string>& give_up) {
    return give_up.value_or("not supported by this process control");
  }
  /// Why start() went back to exec'ing workers since the last call, once.
  virtual std::optional<std::string> take_preload_notice() { return std::nullopt; }
};

/// The real thing: fork/exec, waitpid(-1), /proc, kill(2), PR_SET_CHILD_SUBREAPER, OrphanGuard,
/// and a JobCgroup where cgroup v2 is writable.
class PosixProcessControl final : public ProcessControl {
 public:
  std::vector<std::string> begin_supervision(const std::string& token,
                                             const std::string& scratch_dir) override;
  void end_supervision() override;
  void end_attempt() override;
  void keep_scratch() override;
  Result<StartedProcess> start(const SpawnRequest& request) override;
  Result<pid_t> await_exec(const StartedProcess& started, const std::string& executable) override;
  void watch_group(pid_t pgid) override;
  std::vector<ReapedChild> reap_exited() override;
  std::vector<pid_t> live_children() override;
  void signal_worker(pid_t pgid, int sig) override;
  void signal_group(pid_t pgid, int sig) override;
  void signal_process(pid_t pid, int sig) override;
  void kill_job() override;
  std::variant<int, std::string> begin_preload(const ZygoteSetup& setup) override;
  std::variant<ZygoteReady, std::string> finish_preload(
      const std::optional<std::string>& give_up) override;
  std::optional<std::string> take_preload_notice() override;

 private:
  void own_zygote(pid_t pid);
  OrphanGuard guard_;
  std::unique_ptr<JobCgroup> cgroup_;  // nullptr where cgroup v2 is not writable
  WorkerPidfds workers_;
  std::unique_ptr<ZygoteStarter> zygote_;  // --preload
  bool subreaper_ = false;
};

}  // namespace ddp::launcher
