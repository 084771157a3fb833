// SPDX-License-Identifier: MIT
// pid_hopper STATEFILE: the most evasive leftover a worker can leave (issue 23, item 4). Started by
// a worker, it forks a descendant that
//   1. leaves the job cgroup (moves itself to the root of the cgroup v2 hierarchy, when it can),
//   2. leaves the worker's session and process group (setsid),
//   3. re-executes itself with an empty environment (no DDPRUN_JOB_TOKEN in /proc/PID/environ),
//   4. hops pids for ever: a new process, the parent exits, the child carries on. The new process
//      shares the memory (clone with CLONE_VM, on one of two stacks in turn), so a hop costs no
//      page-table copy: the hopper spends little of its life inside the clone call, where a kill
//      would catch it.
// The hopper's current pid goes to STATEFILE every 64 hops (pwrite of "pid left_cgroup\n", so a
// test sees it change while the hopper lives); it ends on its own when STATEFILE.stop exists, or
// after 120 s. The worker itself returns at once (exit 0).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
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

struct Hopper {
  const char* state_file;
  bool left_cgroup;
  int fd;
  std::string stop;
  std::chrono::steady_clock::time_point end;
  unsigned long hops = 0;
  alignas(16) char stacks[2][64 * 1024];
  volatile pid_t parent_of[2] = {0, 0};
};

Hopper* hopper = nullptr;

int hop_on(void* which_stack);

/// Starts the next process on stack `which` and ends this one.
[[noreturn]] void next_hop(int which) {
  hopper->parent_of[which] = static_cast<pid_t>(::syscall(SYS_getpid));
  ::clone(hop_on, hopper->stacks[which] + sizeof hopper->stacks[which], CLONE_VM | SIGCHLD,
          reinterpret_cast<void*>(static_cast<long>(which)));
  ::syscall(SYS_exit_group, 0);  // a failed clone ends the hopper too
  __builtin_unreachable();
}

int hop_on(void* which_stack) {
  const int which = static_cast<int>(reinterpret_cast<long>(which_stack));
  // The parent may still be on the other stack: the next hop uses it only once the parent is gone.
  while (::syscall(SYS_getppid) == hopper->parent_of[which]) {
  }
  Hopper& h = *hopper;
  if (h.hops++ % 64 == 0) {
    if (::access(h.stop.c_str(), F_OK) == 0 || std::chrono::steady_clock::now() > h.end)
      ::syscall(SYS_exit_group, 0);
    char line[64];
    const int n = std::snprintf(line, sizeof line, "%-10d %d\n",
                                static_cast<int>(::syscall(SYS_getpid)), h.left_cgroup ? 1 : 0);
    if (h.fd >= 0 && ::pwrite(h.fd, line, static_cast<size_t>(n), 0) < 0)
      ::syscall(SYS_exit_group, 1);
  }
  next_hop(1 - which);
}

[[noreturn]] void hop(const char* state_file, bool left_cgroup) {
  hopper =
      new Hopper{state_file, left_cgroup, ::open(state_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644),
                 std::string(state_file) + ".stop",
                 std::chrono::steady_clock::now() + std::chrono::seconds(120)};
  next_hop(0);
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
