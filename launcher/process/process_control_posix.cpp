// SPDX-License-Identifier: MIT
#include <signal.h>

#include "launcher/process/process_control.hpp"

namespace ddp::launcher {

std::vector<std::string> PosixProcessControl::begin_supervision(const std::string& token,
                                                              const std::string& scratch_dir) {
  std::vector<std::string> warnings;
  if (!become_child_subreaper()) {
    warnings.push_back("warning: cannot become a child subreaper; daemonised grandchildren may escape");
  }
  if (!guard_.start(token, scratch_dir)) {
    warnings.push_back("warning: cannot start the orphan guard; `kill -9 ddprun` may leave grandchildren");
  }
  return warnings;
}

void PosixProcessControl::end_supervision() { guard_.release(); }

Result<StartedProcess> PosixProcessControl::start(const SpawnRequest& request) {
  return start_process(request);
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
  return children;
}

void PosixProcessControl::signal_worker(pid_t pgid, int sig) {
  ddp::launcher::signal_group(pgid, sig);
}

void PosixProcessControl::signal_group(pid_t pgid, int sig) {
  if (pgid > 1) ::kill(-pgid, sig);
}

void PosixProcessControl::signal_process(pid_t pid, int sig) {
  if (pid > 1) ::kill(pid, sig);
}

}  // namespace ddp::launcher
