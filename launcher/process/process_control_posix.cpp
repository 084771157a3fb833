// SPDX-License-Identifier: MIT
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/exit_codes.hpp"
#include "launcher/process/process_control.hpp"

namespace ddp::launcher {

std::vector<std::string> PosixProcessControl::begin_supervision(const std::string& token,
                                                                const std::string& scratch_dir) {
  std::vector<std::string> warnings;
  subreaper_ = become_child_subreaper();
  if (!subreaper_) {
    warnings.push_back(
        "warning: cannot become a child subreaper; daemonised grandchildren may escape");
  }
  auto cgroup = JobCgroup::create();
  if (auto* made = std::get_if<std::unique_ptr<JobCgroup>>(&cgroup)) {
    cgroup_ = std::move(*made);
  } else {
    warnings.push_back("notice: no job cgroup (" + std::get<std::string>(cgroup) +
                       "); cleanup relies on process groups, the subreaper and the orphan guard");
  }
  if (!guard_.start(token, scratch_dir, cgroup_ ? cgroup_->path() : std::string())) {
    warnings.push_back(
        "warning: cannot start the orphan guard; `kill -9 ddprun` may leave grandchildren");
  }
  return warnings;
}

void PosixProcessControl::end_supervision() {
  zygote_.reset();
  guard_.release();
  cgroup_.reset();  // kills anything left (nothing, normally) and removes it
}

void PosixProcessControl::end_attempt() {
  if (cgroup_) cgroup_->next_attempt();
  workers_.prune();
}

void PosixProcessControl::keep_scratch() { guard_.keep_scratch(); }

Result<StartedProcess> PosixProcessControl::start(const SpawnRequest& request) {
  SpawnRequest in_cgroup = request;
  if (cgroup_) {
    in_cgroup.cgroup_dir_fd = cgroup_->dir_fd();
    in_cgroup.cgroup_procs_fd = cgroup_->procs_fd();
    if (in_cgroup.cgroup_procs_fd < 0) {
      return Error{exit_codes::kInternal,
                   "cannot create this attempt's job cgroup in " + cgroup_->path()};
    }
  }
  std::optional<Result<StartedProcess>> forked;
  if (zygote_) forked = zygote_->start(in_cgroup);
  auto started = forked ? std::move(*forked) : start_process(in_cgroup);
  // Unreaped (only this loop reaps; a forked worker re-parents to ddprun, the subreaper), so the
  // pid is certainly the worker's.
  if (started) workers_.add(started->pid);
  return started;
}

// --preload (zygote_starter.hpp) ----------------------------------------------------------------

std::variant<int, std::string> PosixProcessControl::begin_preload(const ZygoteSetup& setup) {
  // A forked worker reaches ddprun by re-parenting, which only a subreaper gets.
  if (!subreaper_) return std::string("ddprun could not become a child subreaper");
  ZygoteSetup owned = setup;
  owned.on_spawned = [this](pid_t pid) { own_zygote(pid); };  // every respawn too
  auto starter = std::make_unique<ZygoteStarter>(std::move(owned));
  auto begun = starter->begin();
  if (std::holds_alternative<int>(begun)) zygote_ = std::move(starter);
  return begun;
}

std::variant<ZygoteReady, std::string> PosixProcessControl::finish_preload(
    const std::optional<std::string>& give_up) {
  if (!zygote_) return give_up.value_or("no preloaded interpreter");
  auto ready = zygote_->settle(give_up);
  if (!std::holds_alternative<ZygoteReady>(ready)) zygote_.reset();
  return ready;
}

void PosixProcessControl::own_zygote(pid_t pid) {
  // Part of the job before it imports anything: in its cgroup (beside the attempts', which are
  // emptied after each), so that the run's end kills it and whatever its modules started. Its
  // workers move themselves into the attempt's.
  if (cgroup_) cgroup_->adopt(pid, "preload");
  // Its own session: the guard kills it if ddprun is killed. Our unreaped child, so the pidfd is
  // certainly its.
  const int fd = open_pidfd(pid);
  if (fd >= 0) {
    guard_.watch_group(fd);
    ::close(fd);
  }
}

std::optional<std::string> PosixProcessControl::take_preload_notice() {
  return zygote_ ? zygote_->take_notice() : std::nullopt;
}

Result<pid_t> PosixProcessControl::await_exec(const StartedProcess& started,
                                              const std::string& executable) {
  auto execed = ddp::launcher::await_exec(started, executable);
  if (!execed) workers_.reaped(started.pid);  // await_exec reaped it
  return execed;
}

void PosixProcessControl::watch_group(pid_t pgid) { guard_.watch_group(workers_.fd_of(pgid)); }

std::vector<ReapedChild> PosixProcessControl::reap_exited() {
  auto reaped = reap_exited_children();
  for (const auto& child : reaped) {
    workers_.reaped(child.pid);
    if (zygote_) zygote_->on_reaped(child.pid);
  }
  return reaped;
}

std::vector<pid_t> PosixProcessControl::live_children() {
  std::vector<pid_t> children = list_children();
  std::erase(children, guard_.pid());
  if (cgroup_) {
    // Processes under a subreaper of their own never come back to ddprun; the cgroup knows them.
    for (pid_t pid : cgroup_->members()) {
      if (std::find(children.begin(), children.end(), pid) == children.end())
        children.push_back(pid);
    }
  }
  if (zygote_ && zygote_->pid() > 0) {
    // It serves the next attempt, and so do the members of its group: what its interpreter
    // started (a pyenv shim's helpers, re-parented here when the shim exits) is no worker's
    // leftover, and a group kill of one of them would take the zygote along. The group is the
    // zygote's while it lives (its own session); it is killed with the zygote (~Zygote).
    const pid_t zygote = zygote_->pid();
    std::erase_if(children, [zygote](pid_t pid) {
      ProcStat st;
      return pid == zygote || (read_proc_stat(pid, st) && st.pgrp == zygote);
    });
  }
  return children;
}

void PosixProcessControl::signal_worker(pid_t pgid, int sig) { workers_.signal_worker(pgid, sig); }

void PosixProcessControl::signal_group(pid_t pgid, int sig) { workers_.signal_group(pgid, sig); }

void PosixProcessControl::kill_job() {
  if (cgroup_) cgroup_->kill_all();
}

void PosixProcessControl::signal_process(pid_t pid, int sig) {
  if (pid <= 1 || pid == guard_.pid()) return;
  // The pidfd first, then the checks: if they pass, the pidfd holds the process that passed
  // them (or one that has died since, which it no longer reaches).
  const int pidfd = open_pidfd(pid);
  const int open_error = errno;
  ProcStat st;
  const bool ours =
      read_proc_stat(pid, st) && (st.ppid == ::getpid() || (cgroup_ && cgroup_->contains(pid)) ||
                                  workers_.owns_group(st.pgrp));
  if (pidfd < 0) {
    // Before Linux 5.3: only an unreaped child's number is certainly still ours.
    if (open_error == ENOSYS && ours && st.ppid == ::getpid()) ::kill(pid, sig);
    return;
  }
  if (ours) signal_pidfd(pidfd, sig, false);
  ::close(pidfd);
  // A child of ddprun that left ddprun's session (a daemon a worker made) takes its process group
  // along: a daemon that hops pids is gone from `pid` by now, but its hops share the group, and
  // a group kill reaches every member atomically (a fork racing it fails). The group is provably
  // ours: `pid` is ddprun's unreaped child, so the group's number stays taken while it lives, and
  // every member of a session a descendant made descends from that descendant.
  const bool zygotes_group = zygote_ && st.pgrp == zygote_->pid();
  if (ours && st.ppid == ::getpid() && st.session != ::getsid(0) && st.pgrp > 1 && !zygotes_group) {
    ::kill(-st.pgrp, sig);
  }
}

}  // namespace ddp::launcher
