// SPDX-License-Identifier: MIT
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "launcher/process/owned_processes.hpp"

#ifndef PIDFD_SIGNAL_PROCESS_GROUP
#define PIDFD_SIGNAL_PROCESS_GROUP (1U << 2)
#endif

namespace ddp::launcher {

int open_pidfd(pid_t pid) {
  if (pid <= 0) return -1;
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

bool signal_pidfd(int pidfd, int sig, bool group) {
  if (pidfd < 0) return false;
  const unsigned flags = group ? PIDFD_SIGNAL_PROCESS_GROUP : 0U;
  return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, flags) == 0;
}

bool pidfd_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP)) != 0;
}

bool pidfd_group_gone(int pidfd) { return pidfd_exited(pidfd) && !signal_pidfd(pidfd, 0, true); }

WorkerPidfds::~WorkerPidfds() {
  for (auto& [pid, entry] : entries_) {
    if (entry.fd >= 0) ::close(entry.fd);
  }
}

int WorkerPidfds::add(pid_t pid) {
  Entry& entry = entries_[pid];
  if (entry.fd >= 0) ::close(entry.fd);  // the number was free again: that group is empty
  entry = Entry{open_pidfd(pid), false};
  return entry.fd;
}

void WorkerPidfds::reaped(pid_t pid) {
  auto it = entries_.find(pid);
  if (it != entries_.end()) it->second.reaped = true;
}

int WorkerPidfds::fd_of(pid_t pid) const {
  auto it = entries_.find(pid);
  return it == entries_.end() ? -1 : it->second.fd;
}

void WorkerPidfds::signal_worker(pid_t pid, int sig) {
  auto it = entries_.find(pid);
  if (it == entries_.end() || pid <= 1) return;
  const Entry& e = it->second;
  if (e.fd >= 0) {
    if (signal_pidfd(e.fd, sig, true)) return;
    if (errno == ESRCH) {  // before its setsid(): a group of its own does not exist yet
      signal_pidfd(e.fd, sig, false);
      return;
    }
  }
  // No pidfd (or no group signals in this kernel): the number is ours while it is unreaped.
  if (!e.reaped && ::kill(-pid, sig) != 0 && errno == ESRCH) ::kill(pid, sig);
}

void WorkerPidfds::signal_group(pid_t pid, int sig) {
  auto it = entries_.find(pid);
  if (it == entries_.end() || pid <= 1) return;
  const Entry& e = it->second;
  if (e.fd >= 0 && signal_pidfd(e.fd, sig, true)) return;
  if (e.fd >= 0 && errno == ESRCH) return;  // nothing left in it
  if (!e.reaped) ::kill(-pid, sig);
}

bool WorkerPidfds::owns_group(pid_t pgid) const {
  auto it = entries_.find(pgid);
  if (it == entries_.end()) return false;
  const Entry& e = it->second;
  if (e.fd >= 0) return signal_pidfd(e.fd, 0, true);
  return !e.reaped;
}

void WorkerPidfds::prune() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    // An exited worker whose group is empty: nobody can join that group any more.
    const bool gone = e.fd < 0 ? e.reaped : pidfd_group_gone(e.fd);
    if (gone) {
      if (e.fd >= 0) ::close(e.fd);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ddp::launcher
