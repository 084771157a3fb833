// SPDX-License-Identifier: MIT
#include <signal.h>

#include <algorithm>

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

Result<StartedProcess> PosixProcessControl::start(const SpawnRequest& request) {
  SpawnRequest in_cgroup = request;
  if (cgroup_) {
    in_cgroup.cgroup_dir_fd = cgroup_->dir_fd();
    in_cgroup.cgroup_procs_fd = cgroup_->procs_fd();
  }
  if (zygote_) {
    if (auto forked = zygote_->start(in_cgroup)) return *forked;
  }
  return start_process(in_cgroup);
}

std::variant<ZygoteReady, std::string> PosixProcessControl::enable_preload(
    const ZygoteSetup& setup) {
  // A forked worker reaches ddprun by re-parenting, which only a subreaper gets.
  if (!subreaper_) return std::string("ddprun could not become a child subreaper");
  auto starter = std::make_unique<ZygoteStarter>(setup);
  auto ready = starter->begin();
  if (std::holds_alternative<ZygoteReady>(ready)) {
    zygote_ = std::move(starter);
    guard_.watch_group(zygote_->pid());  // its own session: the guard kills it if ddprun is killed
  }
  return ready;
}

std::optional<std::string> PosixProcessControl::take_preload_notice() {
  return zygote_ ? zygote_->take_notice() : std::nullopt;
}

Result<pid_t> PosixProcessControl::await_exec(const StartedProcess& started,
                                              const std::string& executable) {
  return ddp::launcher::await_exec(started, executable);
}

void PosixProcessControl::watch_group(pid_t pgid) { guard_.watch_group(pgid); }

std::vector<ReapedChild> PosixProcessControl::reap_exited() {
  auto reaped = reap_exited_children();
  if (zygote_) {
    for (const auto& child : reaped) zygote_->on_reaped(child.pid);
  }
  return reaped;
}

std::vector<pid_t> PosixProcessControl::live_children() {
  std::vector<pid_t> children = list_children();
  std::erase(children, guard_.pid());
  if (zygote_) std::erase(children, zygote_->pid());  // serves the next attempt
  if (cgroup_) {
    // Processes under a subreaper of their own never come back to ddprun; the cgroup knows them.
    for (pid_t pid : cgroup_->members()) {
      if (std::find(children.begin(), children.end(), pid) == children.end())
        children.push_back(pid);
    }
  }
  return children;
}

void PosixProcessControl::signal_worker(pid_t pgid, int sig) {
  ddp::launcher::signal_group(pgid, sig);
}

void PosixProcessControl::signal_group(pid_t pgid, int sig) {
  if (pgid > 1) ::kill(-pgid, sig);
}

void PosixProcessControl::kill_job() {
  if (cgroup_) cgroup_->kill_all();
}

void PosixProcessControl::signal_process(pid_t pid, int sig) {
  if (pid > 1) ::kill(pid, sig);
}

}  // namespace ddp::launcher
