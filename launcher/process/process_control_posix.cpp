// SPDX-License-Identifier: MIT
#include <signal.h>

#include <algorithm>

#include "launcher/process/process_control.hpp"

namespace ddp::launcher {

std::vector<std::string> PosixProcessControl::begin_supervision(const std::string& token,
                                                                const std::string& scratch_dir) {
  std::vector<std::string> warnings;
  if (!become_child_subreaper()) {
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
  guard_.release();
  cgroup_.reset();  // kills anything left (nothing, normally) and removes it
}

Result<StartedProcess> PosixProcessControl::start(const SpawnRequest& request) {
  if (!cgroup_) return start_process(request);
  SpawnRequest in_cgroup = request;
  in_cgroup.cgroup_dir_fd = cgroup_->dir_fd();
  in_cgroup.cgroup_procs_fd = cgroup_->procs_fd();
  return start_process(in_cgroup);
}

Result<pid_t> PosixProcessControl::await_exec(const StartedProcess& started,
                                              const std::string& executable) {
  return ddp::launcher::await_exec(started, executable);
}

void PosixProcessControl::watch_group(pid_t pgid) { guard_.watch_group(pgid); }

std::vector<ReapedChild> PosixProcessControl::reap_exited() { return reap_exited_children(); }

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
