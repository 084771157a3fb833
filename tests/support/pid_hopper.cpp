// SPDX-License-Identifier: MIT
// pid_hopper STATEFILE: the most evasive leftover a worker can leave (issue 23, item 4). Started by
// a worker, it forks a descendant that
//   1. leaves the job cgroup (moves itself to the root of the cgroup v2 hierarchy, when it can),
//   2. leaves the worker's session and process group (setsid),
//   3. re-executes itself with an empty environment (no DDPRUN_JOB_TOKEN in /proc/PID/environ),
//   4. hops pids for ever: fork, the parent exits, the child carries on.
// The hopper's current pid goes to STATEFILE every 64 hops (pwrite of "pid left_cgroup\n", so a
// test sees it change while the hopper lives); it ends on its own when STATEFILE.stop exists, or
// after 120 s. The worker itself returns at once (exit 0).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

/// Where cgroup v2 is mounted ("" when it is not).
std::string cgroup2_mount() {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mount_point;
    head >> id >> parent >> dev >> root >> mount_point;
    return mount_point;
  }
  return {};
}

bool leave_cgroup() {
  const std::string mount = cgroup2_mount();
  if (mount.empty()) return false;
  int fd = ::open((mount + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "0", 1) == 1;
  ::close(fd);
  return ok;
}

[[noreturn]] void hop(const char* state_file, bool left_cgroup) {
  const std::string stop = std::string(state_file) + ".stop";
  int fd = ::open(state_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (unsigned long hops = 0;; ++hops) {
    if (hops % 64 == 0) {
      if (::access(stop.c_str(), F_OK) == 0 || std::chrono::steady_clock::now() > end) _exit(0);
      char line[64];
      const int n = std::snprintf(line, sizeof line, "%-10d %d\n", static_cast<int>(::getpid()),
                                  left_cgroup ? 1 : 0);
      if (fd >= 0 && ::pwrite(fd, line, static_cast<size_t>(n), 0) < 0) _exit(1);
    }
    pid_t child = ::fork();
    if (child != 0) _exit(0);  // the parent goes (a failed fork ends the hopper too)
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--hop") == 0) {
    hop(argv[2], std::strcmp(argv[3], "1") == 0);
  }
  if (argc != 2) return 64;
  ::signal(SIGHUP, SIG_IGN);
  if (::fork() == 0) {
    const int null = ::open("/dev/null", O_RDWR);  // as a daemon: no pipe of the worker's kept
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    const bool left = leave_cgroup();
    ::setsid();
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) _exit(1);
    self[n] = '\0';
    char flag[] = "--hop";
    char left_arg[] = "0";
    left_arg[0] = left ? '1' : '0';
    char* args[] = {self, flag, argv[1], left_arg, nullptr};
    char* no_env[] = {nullptr};
    ::execve(self, args, no_env);
    _exit(1);
  }
  return 0;
}
