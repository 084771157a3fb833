// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/process/job_cgroup.hpp"
#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/owned_processes.hpp"

namespace ddp::launcher {
namespace {

// Records on the guard's socket (one int32 each; kWatch carries a pidfd).
constexpr int32_t kDoneRecord = 0;
constexpr int32_t kWatchRecord = 1;
constexpr int32_t kKeepScratchRecord = 2;

bool environ_has(pid_t pid, const std::string& needle) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string env;
  char buf[16384];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && env.size() < (4u << 20)) env.append(buf, n);
  ::close(fd);
  // Entries are NUL-separated; match a whole entry.
  size_t pos = 0;
  while ((pos = env.find(needle, pos)) != std::string::npos) {
    bool starts = pos == 0 || env[pos - 1] == '\0';
    bool ends = pos + needle.size() == env.size() || env[pos + needle.size()] == '\0';
    if (starts && ends) return true;
    pos += needle.size();
  }
  return false;
}

int kill_marked_processes(const std::string& needle) {
  int killed = 0;
  const pid_t self = ::getpid();
  DIR* dir = ::opendir("/proc");
  if (!dir) return 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
    pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid == self) continue;
    // The pidfd first, then the check: what it reaches is the process that was checked (or one
    // that has died since, which a signal through it no longer reaches).
    const int pidfd = open_pidfd(pid);
    if (pidfd < 0) continue;
    if (environ_has(pid, needle) && signal_pidfd(pidfd, SIGKILL, false)) ++killed;
    ::close(pidfd);
  }
  ::closedir(dir);
  return killed;
}

/// One record, with the pidfd it carries (-1 if none); false at EOF or on a torn record.
bool receive(int socket, int32_t& record, int& fd) {
  fd = -1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  iovec iov{&record, sizeof record};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n > 0 && c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    }
  }
  return n == static_cast<ssize_t>(sizeof record);
}

[[noreturn]] void guard_main(int socket, const std::string& token, const std::string& scratch_dir,
                             const std::string& cgroup_dir) {
  ::setpgid(0, 0);  // a Ctrl-C or a kill of ddprun's group must not take the guard down
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Hold no descriptor of ddprun's except our socket (a held stdout pipe would delay EOF for
  // whoever reads ddprun's output).
  int devnull = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  if (::syscall(SYS_close_range, 3U, static_cast<unsigned>(socket) - 1, 0U) != 0 ||
      ::syscall(SYS_close_range, static_cast<unsigned>(socket) + 1, ~0U, 0U) != 0) {
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != socket) ::close(fd);
    }
  }
  std::vector<int> workers;  // pidfds of workers whose group may still have members
  bool keep_scratch = false;
  int32_t record = 0;
  int fd = -1;
  while (receive(socket, record, fd)) {
    if (record == kDoneRecord) ::_exit(0);
    if (record == kKeepScratchRecord) keep_scratch = true;
    if (record == kWatchRecord && fd >= 0) {
      // Groups that are gone for good make room (bounded by the live groups, not the restarts).
      std::erase_if(workers, [](int w) {
        if (!pidfd_group_gone(w)) return false;
        ::close(w);
        return true;
      });
      workers.push_back(fd);
    } else if (fd >= 0) {
      ::close(fd);
    }
  }
  // EOF (or a torn record): ddprun is gone without saying "done".
  // The job cgroup, where there is one, holds every process of the run whatever it did.
  if (!cgroup_dir.empty()) kill_and_remove_cgroup(cgroup_dir, 5000);
  const std::string needle = std::string(OrphanGuard::kTokenVariable) + "=" + token;
  // A few rounds: a process may fork while we kill its relatives.
  for (int round = 0; round < 3; ++round) {
    for (int w : workers) {
      signal_pidfd(w, SIGKILL, true);
      signal_pidfd(w, SIGKILL, false);  // a worker killed before its setsid() leads no group
    }
    if (kill_marked_processes(needle) == 0 && round > 0) break;
    ::usleep(20'000);
  }
  if (!scratch_dir.empty() && !keep_scratch) {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_dir, ignored);
  }
  ::_exit(0);
}

}  // namespace

bool OrphanGuard::start(const std::string& token, const std::string& scratch_dir,
                        const std::string& cgroup_dir) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) return false;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  if (pid == 0) {
    ::close(fds[1]);
    guard_main(fds[0], token, scratch_dir, cgroup_dir);
  }
  ::close(fds[0]);
  pid_ = pid;
  socket_ = fds[1];
  return true;
}

void OrphanGuard::send(int32_t record, int fd) {
  if (socket_ < 0) return;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&record, sizeof record};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  while (::sendmsg(socket_, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

void OrphanGuard::watch_group(int worker_pidfd) {
  if (worker_pidfd >= 0) send(kWatchRecord, worker_pidfd);
}

void OrphanGuard::keep_scratch() { send(kKeepScratchRecord); }

void OrphanGuard::release() {
  if (socket_ >= 0) {
    send(kDoneRecord);
    ::close(socket_);
    socket_ = -1;
  }
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;  // ECHILD means the SIGCHLD handler already reaped it
  }
}

OrphanGuard::~OrphanGuard() { release(); }

}  // namespace ddp::launcher
