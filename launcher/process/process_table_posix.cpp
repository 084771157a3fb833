// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "launcher/process/process_table.hpp"

namespace ddp::launcher {

bool become_child_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

std::vector<ReapedChild> reap_exited_children() {
  std::vector<ReapedChild> out;
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      out.push_back({pid, status});
      continue;
    }
    if (pid < 0 && errno == EINTR) continue;
    break;  // 0: children left but none exited; ECHILD: no children
  }
  return out;
}

namespace {

/// Whether a child of ddprun is worth a signal. A live one is. A zombie is dead already, except as
/// evidence: one that left ddprun's session was a daemon a worker started, and a daemon that hops
/// pids (fork, exit, again) is a zombie by the time its stat is read, nearly every time; its
/// process group (which the hops share) still holds the live one.
bool is_leftover(const ProcStat& st) { return st.state != 'Z' || st.session != ::getsid(0); }

/// Fast path: the kernel's own list (CONFIG_PROC_CHILDREN). ddprun has one thread, so its
/// thread id is its pid and this file lists every child.
bool read_children_file(std::vector<pid_t>& children) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/children", static_cast<int>(::getpid()));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (n < 0) return false;
  const char* p = text.c_str();
  char* end = nullptr;
  for (long pid = std::strtol(p, &end, 10); end != p; pid = std::strtol(p, &end, 10)) {
    ProcStat st;
    if (read_proc_stat(static_cast<pid_t>(pid), st) && is_leftover(st)) children.push_back(st.pid);
    p = end;
  }
  return true;
}

}  // namespace

std::vector<pid_t> list_children() {
  std::vector<pid_t> children;
  if (read_children_file(children)) return children;
  const pid_t self = ::getpid();
  DIR* dir = ::opendir("/proc");
  if (!dir) return children;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
    ProcStat st;
    if (read_proc_stat(static_cast<pid_t>(std::atoi(entry->d_name)), st) && st.ppid == self &&
        is_leftover(st)) {
      children.push_back(st.pid);
    }
  }
  ::closedir(dir);
  return children;
}

void signal_group(pid_t pgid, int sig) {
  if (pgid <= 1) return;  // never signal "every process" or init's group
  if (::kill(-pgid, sig) != 0 && errno == ESRCH) ::kill(pgid, sig);
}

}  // namespace ddp::launcher
