// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
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

namespace ddp::launcher {
namespace {

constexpr int32_t kDoneRecord = 0;

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
    if (pid != self && environ_has(pid, needle) && ::kill(pid, SIGKILL) == 0) ++killed;
  }
  ::closedir(dir);
  return killed;
}

[[noreturn]] void guard_main(int read_fd, const std::string& token, const std::string& scratch_dir,
                             const std::string& cgroup_dir) {
  ::setpgid(0, 0);  // a Ctrl-C or a kill of ddprun's group must not take the guard down
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Hold no descriptor of ddprun's except our pipe (a held stdout pipe would delay EOF for
  // whoever reads ddprun's output).
  int devnull = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  if (::syscall(SYS_close_range, 3U, static_cast<unsigned>(read_fd) - 1, 0U) != 0 ||
      ::syscall(SYS_close_range, static_cast<unsigned>(read_fd) + 1, ~0U, 0U) != 0) {
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != read_fd) ::close(fd);
    }
  }
  std::vector<pid_t> groups;
  while (true) {
    int32_t record = 0;
    ssize_t n = ::read(read_fd, &record, sizeof record);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof record)) {
      if (record == kDoneRecord) ::_exit(0);
      groups.push_back(record);
      continue;
    }
    break;  // EOF (or a torn record): ddprun is gone without saying "done"
  }
  // The job cgroup, where there is one, holds every process of the run whatever it did.
  if (!cgroup_dir.empty()) kill_and_remove_cgroup(cgroup_dir, 5000);
  const std::string needle = std::string(OrphanGuard::kTokenVariable) + "=" + token;
  // A few rounds: a process may fork while we kill its relatives.
  for (int round = 0; round < 3; ++round) {
    for (pid_t pgid : groups) {
      if (pgid > 1) ::kill(-pgid, SIGKILL);
    }
    if (kill_marked_processes(needle) == 0 && round > 0) break;
    ::usleep(20'000);
  }
  if (!scratch_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_dir, ignored);
  }
  ::_exit(0);
}

}  // namespace

bool OrphanGuard::start(const std::string& token, const std::string& scratch_dir,
                        const std::string& cgroup_dir) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
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
  write_fd_ = fds[1];
  return true;
}

void OrphanGuard::watch_group(pid_t pgid) {
  if (write_fd_ < 0) return;
  int32_t record = static_cast<int32_t>(pgid);
  ssize_t ignored = ::write(write_fd_, &record, sizeof record);  // 4 bytes: atomic on a pipe
  (void)ignored;
}

void OrphanGuard::release() {
  if (write_fd_ >= 0) {
    int32_t done = kDoneRecord;
    ssize_t ignored = ::write(write_fd_, &done, sizeof done);
    (void)ignored;
    ::close(write_fd_);
    write_fd_ = -1;
  }
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;  // ECHILD means the SIGCHLD handler already reaped it
  }
}

OrphanGuard::~OrphanGuard() { release(); }

}  // namespace ddp::launcher
