// SPDX-License-Identifier: MIT
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/exit_codes.hpp"
#include "launcher/process/spawn.hpp"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace ddp::launcher {
namespace {

rlim_t g_worker_fd_soft_limit = RLIM_INFINITY;  // RLIM_INFINITY: leave ddprun's own

std::vector<char*> as_c_array(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

/// --numa-binding, prepared before fork (the child may not allocate).
struct ChildPlacement {
  bool set_cpus = false;
  cpu_set_t cpus;
  bool set_memory = false;
  unsigned long memory_nodes[16] = {};  // a nodemask for up to 1024 nodes
};

ChildPlacement prepare_placement(const SpawnRequest& request) {
  ChildPlacement p;
  CPU_ZERO(&p.cpus);
  for (int cpu : request.cpu_affinity) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) {
      CPU_SET(cpu, &p.cpus);
      p.set_cpus = true;
    }
  }
  const int node = request.preferred_memory_node;
  constexpr int kBits = 8 * sizeof(unsigned long);
  if (node >= 0 && node < 16 * kBits) {
    p.memory_nodes[node / kBits] |= 1UL << (node % kBits);
    p.set_memory = true;
  }
  return p;
}

/// Runs in the child between fork and exec: only async-signal-safe calls, no allocation.
[[noreturn]] void exec_child(const SpawnRequest& request, char* const* argv, char* const* envp,
                             pid_t parent, int error_pipe, bool move_into_cgroup,
                             const ChildPlacement& placement) {
  auto fail = [&](int err) {
    ssize_t ignored = ::write(error_pipe, &err, sizeof err);
    (void)ignored;
    ::_exit(exit_codes::kNotExecutable);
  };
  // A new session, not just a new group: with no controlling terminal, job control can never
  // stop the worker (a background group reading the terminal would get SIGTTIN and hang
  // forever). torch 2.x does the same (start_new_session=True).
  ::setsid();
  // Into the job cgroup first, before this process can start anything that might escape.
  if (move_into_cgroup && ::write(request.cgroup_procs_fd, "0", 1) != 1) {
    int err = -errno;  // negative: not an exec failure
    ssize_t ignored = ::write(error_pipe, &err, sizeof err);
    (void)ignored;
    ::_exit(exit_codes::kInternal);
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  if (::getppid() != parent) ::_exit(exit_codes::kInternal);  // ddprun died before prctl
  // ddprun handles and ignores signals; the worker starts with the defaults (SIGPIPE included).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (request.stdout_fd >= 0 && ::dup2(request.stdout_fd, STDOUT_FILENO) < 0) fail(errno);
  if (request.stderr_fd >= 0 && ::dup2(request.stderr_fd, STDERR_FILENO) < 0) fail(errno);
  // Every other descriptor ddprun holds (other workers' pipes, log files, epoll) must not leak
  // into the worker, or a pipe would never see EOF. The error pipe is already close-on-exec.
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != error_pipe) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  if (request.pass_fd >= 0) {
    if (request.pass_fd != 3 && ::dup2(request.pass_fd, 3) < 0) fail(errno);
    if (::fcntl(3, F_SETFD, 0) != 0) fail(errno);  // dup2 cleared it; pass_fd == 3 did not
  }
  // Best effort, like numactl --preferred: a refused placement leaves the inherited one.
  if (placement.set_cpus) ::sched_setaffinity(0, sizeof placement.cpus, &placement.cpus);
  if (placement.set_memory) {
    constexpr long kMpolPreferred = 1;  // <linux/mempolicy.h>, without libnuma
    ::syscall(SYS_set_mempolicy, kMpolPreferred, placement.memory_nodes,
              static_cast<unsigned long>(8 * sizeof placement.memory_nodes));
  }
  if (g_worker_fd_soft_limit != RLIM_INFINITY) {  // the limit ddprun itself was started with
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
      lim.rlim_cur = g_worker_fd_soft_limit;
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
  }
  ::execve(request.executable.c_str(), argv, envp);
  fail(errno);
  __builtin_unreachable();
}

}  // namespace

void set_worker_fd_soft_limit(rlim_t soft) { g_worker_fd_soft_limit = soft; }

Result<StartedProcess> start_process(const SpawnRequest& request) {
  auto argv = as_c_array(request.argv);
  auto envp = as_c_array(request.envp);
  const ChildPlacement placement = prepare_placement(request);
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    return Error{exit_codes::kInternal, fmt::format("pipe: {}", std::strerror(errno))};
  }
  if (request.pass_fd >= 0 && error_pipe[1] <= 3) {  // the child's dup2 onto 3 must not hit it
    const int moved = ::fcntl(error_pipe[1], F_DUPFD_CLOEXEC, 4);
    if (moved >= 0) {
      ::close(error_pipe[1]);
      error_pipe[1] = moved;
    }
  }
  // Block signals across fork so that no handler of ddprun's runs in the child.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t parent = ::getpid();
  pid_t pid = -1;
  bool born_in_cgroup = false;
  if (request.cgroup_dir_fd >= 0) {
    // Like fork(), but the child starts in the job cgroup. The child only makes raw system calls
    // before exec, so skipping glibc's fork bookkeeping is safe.
    clone_args args{};
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<std::uint64_t>(request.cgroup_dir_fd);
    pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
    born_in_cgroup = pid >= 0;
  }
  if (!born_in_cgroup) pid = ::fork();
  if (pid == 0) {
    exec_child(request, argv.data(), envp.data(), parent, error_pipe[1],
               !born_in_cgroup && request.cgroup_procs_fd >= 0, placement);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(error_pipe[1]);
  if (pid < 0) {
    ::close(error_pipe[0]);
    return Error{exit_codes::kInternal, fmt::format("fork: {}", std::strerror(fork_errno))};
  }
  // No setpgid(pid, pid) here: it would make setsid() fail in the child. Until the child's
  // setsid() runs, signal_group() falls back to signalling the pid itself.
  return StartedProcess{pid, error_pipe[0]};
}

Result<pid_t> await_exec(const StartedProcess& started, const std::string& executable) {
  // A worker forked by the zygote (zygote.hpp) reports on a socket and waits on it for this
  // go-ahead, which its caller gives only once it has recorded the pid: a fork that ddprun never
  // claimed runs no user code. An exec'd child reports on a pipe and waits for nothing.
  struct stat report {};
  if (::fstat(started.exec_report_fd, &report) == 0 && S_ISSOCK(report.st_mode)) {
    const char go = 'g';
    ssize_t sent;
    do {
      sent = ::send(started.exec_report_fd, &go, 1, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    // A worker that failed its setup already wrote why and exited: read it below.
  }
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(started.exec_report_fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(started.exec_report_fd);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    while (::waitpid(started.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (child_errno < 0) {
      return Error{
          exit_codes::kInternal,
          fmt::format("cannot move a worker into its job cgroup: {}", std::strerror(-child_errno))};
    }
    return Error{exit_codes::kNotExecutable,
                 fmt::format("cannot execute '{}': {}", executable, std::strerror(child_errno))};
  }
  return started.pid;
}

}  // namespace ddp::launcher
