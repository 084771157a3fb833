// SPDX-License-Identifier: MIT
#include "launcher/health/stack_dumper.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <utility>

#include "common/exit_codes.hpp"
#include "launcher/common/utc_time.hpp"

extern char** environ;

#ifndef SYS_close_range      // older C library headers (the portable builds' glibc 2.28)
#define SYS_close_range 436  // one number on every architecture since Linux 5.9
#endif

namespace ddp::launcher::health {
namespace {

int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

/// Opens a stacks file for appending, or -1 with `why` set. The file sits in a directory the
/// workers can write: one of them may have made it a FIFO (an open for writing would block the
/// loop until a reader comes), a device, or a link to one. Only a regular file is written.
int open_stacks_file(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) {
    // ENXIO: a FIFO nobody reads; ELOOP: a link (O_NOFOLLOW).
    why = errno == ENXIO || errno == ELOOP ? "not a regular file" : std::strerror(errno);
    return -1;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    why = "not a regular file";
    return -1;
  }
  return fd;
}

void append_line(const std::string& path, const std::string& line) {
  std::string why;
  const int fd = open_stacks_file(path, why);
  if (fd < 0) return;
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
  ::close(fd);
}

/// A child with no exit signal, so that waitpid(-1) (the Agent's reaper) passes it by; the
/// caller gets its pidfd and reaps it with waitid(P_PIDFD). Returns the pid (-1: errno set).
/// execve gives a process the exit signal SIGCHLD again (the kernel's de_thread), so this child
/// must never exec: it is the keeper below, and the tool is its child.
pid_t clone_without_exit_signal(int& pidfd) {
  clone_args args{};
  args.flags = CLONE_PIDFD;
  args.pidfd = reinterpret_cast<std::uint64_t>(&pidfd);
  args.exit_signal = 0;
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0 && (errno == ENOSYS || errno == EPERM)) {
    // clone3 refused (an old kernel, a seccomp filter): the classic clone; its first three
    // arguments (flags, stack, parent_tid, where CLONE_PIDFD puts the pidfd) are the same on
    // every architecture ddprun builds for.
    pid = ::syscall(SYS_clone, CLONE_PIDFD, nullptr, &pidfd, nullptr, nullptr);
  }
  return static_cast<pid_t>(pid);
}

/// Ends the calling process the way `status` (a waitpid status) says its child ended: the same
/// exit code, or the same signal (without a core file).
[[noreturn]] void end_like(int status) {
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::kill(static_cast<pid_t>(::syscall(SYS_getpid)), sig);
  ::_exit(128 + sig);  // a signal that does not end a process by default
}

/// Closes every descriptor from `first` up (close_range, or one by one on an old kernel).
void close_from(int first) {
  if (::syscall(SYS_close_range, first, ~0U, 0) == 0) return;
  rlimit limit{};
  const int last = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                       ? static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20))
                       : 1 << 16;
  for (int fd = first; fd < last; ++fd) ::close(fd);
}

/// The keeper (the clone above, all signals blocked): starts the tool as its own child and ends
/// as the tool ended. It dies with ddprun and the tool with it (PR_SET_PDEATHSIG on both), and
/// neither keeps ddprun's descriptors (the store's and the status server's listening sockets,
/// the orphan guard's end, output pipes): a ddprun SIGKILLed during a dump leaves nothing
/// holding its port. Only system calls here: this process is a copy of ddprun made by a raw
/// clone.
[[noreturn]] void run_keeper(char* const* args, int output, pid_t ddprun, const sigset_t& old) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != ddprun) ::_exit(exit_codes::kCannotInvoke);  // ddprun is gone already
  if (output < 3) output = ::fcntl(output, F_DUPFD, 3);           // out of the way of 0, 1 and 2
  const int in = ::open("/dev/null", O_RDONLY);
  if (in < 0 || ::dup2(in, 0) < 0 || ::dup2(output, 1) < 0 || ::dup2(output, 2) < 0)
    ::_exit(exit_codes::kCannotInvoke);
  close_from(3);
  const auto keeper = static_cast<pid_t>(::syscall(SYS_getpid));
  // A plain fork by the raw system call: glibc's fork() must not run in a raw clone's child.
  const auto tool =
      static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr));
  if (tool == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != keeper) ::_exit(exit_codes::kCannotInvoke);  // the keeper is gone already
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execve(args[0], args, environ);
    ::_exit(exit_codes::kNotExecutable);
  }
  if (tool < 0) ::_exit(exit_codes::kCannotInvoke);
  int status = 0;
  while (::waitpid(tool, &status, 0) < 0) {
    if (errno != EINTR) ::_exit(exit_codes::kCannotInvoke);
  }
  end_like(status);
}

/// Starts `argv` with stdin on /dev/null and stdout and stderr appended to `output` (a
/// descriptor of the stacks file), under a keeper whose pid and pidfd are returned.
pid_t start_tool(std::vector<std::string>& argv, int output, int& pidfd) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t ddprun = ::getpid();
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);  // no handler of ddprun's runs in the child
  const pid_t pid = clone_without_exit_signal(pidfd);
  if (pid == 0) run_keeper(args.data(), output, ddprun, old);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = clone_errno;
  return pid;
}

/// Reaps the tool; its outcome ("" when it has not ended yet).
std::string reap_tool(int pidfd, bool block) {
  siginfo_t info{};
  const int options = WEXITED | __WALL | (block ? 0 : WNOHANG);
  if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, options) != 0)
    return "unknown";
  if (info.si_pid == 0) return "";
  if (info.si_code == CLD_EXITED)
    return info.si_status == 0 ? "ok" : fmt::format("exit {}", info.si_status);
  return fmt::format("signal {}", info.si_status);
}

}  // namespace

StackTools StackTools::find(const std::string& path_variable) {
  StackTools tools;
  std::stringstream dirs(path_variable);
  std::string dir;
  auto lookup = [](const std::string& d, const char* name, std::string& out) {
    if (!out.empty() || d.empty()) return;
    std::string candidate = d + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) out = candidate;
  };
  while (std::getline(dirs, dir, ':')) {
    lookup(dir, "py-spy", tools.py_spy);
    lookup(dir, "eu-stack", tools.eu_stack);
    lookup(dir, "gdb", tools.gdb);
  }
  return tools;
}

bool is_python_process(pid_t pid) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
  if (ec) return false;
  return exe.filename().string().starts_with("python");
}

std::vector<ToolCommand> tool_commands(const StackTools& tools, pid_t pid) {
  std::vector<ToolCommand> commands;
  const std::string p = std::to_string(pid);
  if (!tools.py_spy.empty() && is_python_process(pid))
    commands.push_back({"py-spy", {tools.py_spy, "dump", "--pid", p}});
  if (!tools.eu_stack.empty()) commands.push_back({"eu-stack", {tools.eu_stack, "-p", p}});
  if (!tools.gdb.empty()) {
    commands.push_back(
        {"gdb", {tools.gdb, "-nx", "-batch", "-p", p, "-ex", "thread apply all bt"}});
  }
  return commands;
}

/// One dump: a tool per target (the next one in line when it fails), a shared deadline, and
/// the callback once the last one ends.
struct StackDumper::Run : std::enable_shared_from_this<StackDumper::Run> {
  struct Tool {
    pid_t pid = -1;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd;
    bool ended = false;
    std::vector<ToolCommand> next;  // the tools to try, in order, should this one fail
  };
  explicit Run(boost::asio::io_context& io) : io(io), deadline(io) {}
  boost::asio::io_context& io;
  boost::asio::steady_timer deadline;
  std::vector<Tool> tools;
  std::vector<StackResult> results;
  size_t pending = 0;
  bool cancelled = false;
  Done done;
  std::function<void()> idle;  // the dumper is free again (before `done`: it may dump again)

  /// Tool `i` ended (its pidfd turned readable), or is reaped here after a kill (`block`).
  /// Waits (on the loop) for tool `i` to end.
  void watch(size_t i) {
    tools[i].pidfd->async_wait(boost::asio::posix::descriptor_base::wait_read,
                               [self = shared_from_this(), i](const boost::system::error_code& ec) {
                                 if (!ec && !self->cancelled) self->ended(i);
                               });
  }
  /// Tool `i` ended (its pidfd turned readable), or is reaped here after a kill (`block`).
  void ended(size_t i, bool block = false) {
    if (tools[i].ended) return;
    const std::string outcome = reap_tool(tools[i].pidfd->native_handle(), block);
    if (outcome.empty()) {  // not yet (a spurious wake-up)
      watch(i);
      return;
    }
    tools[i].ended = true;
    if (results[i].outcome.empty()) results[i].outcome = outcome;
    boost::system::error_code ignored;
    tools[i].pidfd->close(ignored);
    if (outcome != "ok" && !results[i].timed_out && !cancelled) {
      append_line(results[i].output_path,
                  fmt::format("# ddprun: {} ended with {}{}\n", results[i].tool, outcome,
                              tools[i].next.empty() ? "" : "; trying " + tools[i].next[0].name));
      // A tool that cannot do it here (a pyenv shim without it, py-spy on a stopped process)
      // hands over to the next one, within the same deadline.
      if (start_next(i)) return;
    }
    if (--pending == 0) finish();
  }
  /// Starts the next tool in line for target `i`; false when none is left or none starts.
  bool start_next(size_t i) {
    while (!tools[i].next.empty()) {
      ToolCommand command = std::move(tools[i].next.front());
      tools[i].next.erase(tools[i].next.begin());
      results[i].tool = command.name;
      results[i].outcome.clear();
      if (start(i, command)) {
        watch(i);
        return true;
      }
    }
    return false;
  }
  /// Starts `command` for target `i` (its output appended to the stacks file); false, with the
  /// outcome and a line in the file, when it cannot.
  bool start(size_t i, ToolCommand& command) {
    std::string unusable;
    const int output = open_stacks_file(results[i].output_path, unusable);
    if (output < 0) {
      // Nowhere to write the stacks (a FIFO or a device put there by a worker): no tool runs.
      results[i].outcome = fmt::format("not started: {}", unusable);
      tools[i].next.clear();
      return false;
    }
    int pidfd = -1;
    const pid_t pid = start_tool(command.argv, output, pidfd);
    const int start_errno = errno;
    ::close(output);
    if (pid <= 0) {
      append_line(results[i].output_path, fmt::format("# ddprun: cannot run {}: {}\n",
                                                      command.argv[0], std::strerror(start_errno)));
      results[i].outcome = "not started";
      return false;
    }
    tools[i].pid = pid;
    tools[i].pidfd = std::make_unique<boost::asio::posix::stream_descriptor>(io, pidfd);
    tools[i].ended = false;
    return true;
  }
  void finish() {
    deadline.cancel();
    if (idle) std::exchange(idle, nullptr)();
    if (!cancelled && done) {
      Done d = std::move(done);
      d(std::move(results));
    }
  }
  void kill_all(bool timed_out) {
    for (size_t i = 0; i < tools.size(); ++i) {
      if (tools[i].ended) continue;
      pidfd_send_signal(tools[i].pidfd->native_handle(), SIGKILL);
      results[i].outcome = timed_out ? "timed out" : "cancelled";
      if (timed_out) {
        results[i].timed_out = true;
        append_line(results[i].output_path,
                    fmt::format("# ddprun: {} did not finish in time; killed\n", results[i].tool));
      }
    }
  }
};

StackDumper::StackDumper(boost::asio::io_context& io, StackTools tools,
                         std::chrono::milliseconds limit)
    : io_(io), tools_(std::move(tools)), limit_(limit) {}

StackDumper::~StackDumper() { cancel(); }

std::vector<pid_t> StackDumper::tool_pids() const {
  std::vector<pid_t> pids;
  if (!running_) return pids;
  for (const auto& t : running_->tools) {
    if (!t.ended) pids.push_back(t.pid);
  }
  return pids;
}

void StackDumper::cancel() {
  if (!running_) return;
  auto run = std::exchange(running_, nullptr);
  run->cancelled = true;
  run->kill_all(false);
  run->deadline.cancel();
  // SIGKILLed: they end at once, and nobody else reaps them.
  for (size_t i = 0; i < run->tools.size(); ++i) run->ended(i, true);
}

void StackDumper::dump(const std::vector<StackTarget>& targets, const std::string& reason,
                       Done done) {
  auto run = std::make_shared<Run>(io_);
  run->done = std::move(done);
  const std::string when = format_utc(std::chrono::system_clock::now());
  for (const auto& t : targets) {
    std::vector<ToolCommand> commands = tool_commands(tools_, t.pid);
    const std::string first = commands.empty() ? "" : commands[0].name;
    append_line(t.output_path,
                fmt::format("# ddprun: stacks of rank {} (pid {}) at {} ({}){}\n", t.rank, t.pid,
                            when, reason, first.empty() ? "" : ", by " + first));
    if (commands.empty())
      append_line(t.output_path, "# ddprun: no stack tool found (py-spy, eu-stack, gdb)\n");
    run->results.push_back(StackResult{t.rank, t.pid, t.output_path, first, false, ""});
    run->tools.push_back(Run::Tool{-1, nullptr, true, std::move(commands)});
    const size_t i = run->tools.size() - 1;
    if (!run->tools[i].next.empty()) run->start_next(i);
  }
  for (const auto& t : run->tools) {
    if (!t.ended) ++run->pending;
  }
  if (run->pending == 0) {
    boost::asio::post(io_, [run] { run->finish(); });
    return;
  }
  running_ = run;
  run->idle = [this, raw = run.get()] {
    if (running_.get() == raw) running_.reset();
  };
  run->deadline.expires_after(limit_);
  run->deadline.async_wait([run](const boost::system::error_code& ec) {
    if (!ec) run->kill_all(true);  // their pidfds turn readable next: ended() follows
  });
}

}  // namespace ddp::launcher::health
