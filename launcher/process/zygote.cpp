// SPDX-License-Identifier: MIT
#include "launcher/process/zygote.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launcher/process/zygote_script.hpp"
#include "rendezvous/json_text.hpp"

namespace ddp::launcher {
namespace {

constexpr size_t kMaxZygoteAnswer = 64 * 1024;  // its answers are small: a pid, a line

enum class Received { Message, Timeout, Closed };

/// Waits at most `timeout` for one answer.
Received receive_from_zygote(int fd, std::chrono::milliseconds timeout, std::string& out,
                             std::string& why) {
  pollfd p{fd, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int ready;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    if (ready >= 0 || errno != EINTR) break;
  }
  if (ready == 0) {
    why = fmt::format("no answer within {:.3g} s (stopped?)", timeout.count() / 1000.0);
    return Received::Timeout;
  }
  out.assign(kMaxZygoteAnswer, '\0');
  ssize_t n;
  do {
    n = ::recv(fd, out.data(), out.size(), MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    why = n == 0 ? "it exited" : std::strerror(errno);
    return Received::Closed;
  }
  out.resize(static_cast<size_t>(n));
  return Received::Message;
}

/// The forked worker's word on its setup (re-parented, its death signal, its cgroup): 0 when done
/// (it then waits for the go-ahead), an errno (negative: its own codes) when it failed and exits.
/// Read here, while the request's descriptors are still open, so that a failed setup is exec'd.
std::optional<std::string> await_worker_setup(int fd, std::chrono::milliseconds timeout) {
  int word = 0;
  std::string bytes, why;
  switch (receive_from_zygote(fd, timeout, bytes, why)) {
    case Received::Timeout:
    case Received::Closed:
      return fmt::format("a forked worker did not set itself up: {}", why);
    case Received::Message:
      break;
  }
  if (bytes.size() != sizeof word) return std::string("a forked worker did not set itself up");
  std::memcpy(&word, bytes.data(), sizeof word);
  if (word == 0) return std::nullopt;
  if (word == -ECHILD) return std::string("a forked worker was not re-parented to ddprun");
  if (word < 0) {
    return fmt::format("a forked worker cannot move into its job cgroup: {}", std::strerror(-word));
  }
  return fmt::format("a forked worker could not set itself up: {}", std::strerror(word));
}

bool send_datagram(int fd, const std::string& message, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(message.size());
}

/// A request of any size: its text in a memfd (the first descriptor), a small header naming its
/// size. A datagram alone is limited by the socket's buffer (a 110 KB argument did not fit).
/// Empty, or why it could not be sent.
std::string send_request(int fd, const std::string& text, std::vector<int> fds, int& err) {
  err = 0;
  const int body = ::memfd_create("ddprun-zygote-request", MFD_CLOEXEC);
  if (body < 0) {
    err = errno;
    return fmt::format("memfd_create: {}", std::strerror(err));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(body, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = errno;
      ::close(body);
      return fmt::format("cannot write the request: {}", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  fds.insert(fds.begin(), body);
  const bool sent = send_datagram(fd, dump_json(nlohmann::json{{"size", text.size()}}), fds);
  err = sent ? 0 : errno;
  ::close(body);
  return sent ? std::string() : std::string(std::strerror(err));
}

/// The umask without changing it (umask(2) cannot read it alone).
unsigned read_umask() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "Umask:") {
      std::string octal;
      status >> octal;
      return static_cast<unsigned>(std::stoul(octal, nullptr, 8));
    }
    status.ignore(1 << 16, '\n');
  }
  const mode_t old = ::umask(022);  // pre-4.7 kernels: read it by setting it back
  ::umask(old);
  return old;
}

std::string current_directory() {
  std::string buffer(4096, '\0');
  if (::getcwd(buffer.data(), buffer.size()) == nullptr) return "/";
  buffer.resize(std::strlen(buffer.c_str()));
  return buffer;
}

}  // namespace

std::string worker_description(const SpawnRequest& request, const PythonInvocation& program,
                               const std::vector<std::string>& fd_names) {
  // SpawnRequest, field by field, as exec_child() (spawn_posix.cpp) applies it:
  //   executable, argv     -> the program to run (mode, target, args; orig_argv)
  //   envp                 -> the environment, applied over the one left by the imports
  //   stdout_fd, stderr_fd -> passed as descriptors ("stdout", "stderr")
  //   cgroup_dir_fd/procs  -> passed as a descriptor ("cgroup"); the worker moves itself in
  //   cpu_affinity         -> sched_setaffinity
  //   preferred_memory_node -> set_mempolicy(MPOL_PREFERRED)
  //   pass_fd              -> never for a worker
  // RLIMIT_NOFILE (set_worker_fd_soft_limit) is the zygote's own, set when it was exec'd.
  return dump_json(nlohmann::json{{"mode", program.mode},
                                  {"target", program.target},
                                  {"args", program.args},
                                  {"orig_argv", request.argv},
                                  {"env", request.envp},
                                  {"cwd", current_directory()},
                                  {"umask", read_umask()},
                                  {"parent", ::getpid()},
                                  {"cpus", request.cpu_affinity},
                                  {"memory_node", request.preferred_memory_node},
                                  {"fds", fd_names}});
}

std::variant<std::unique_ptr<Zygote>, std::string> Zygote::spawn(const ZygoteSetup& setup) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return fmt::format("socketpair: {}", std::strerror(errno));
  SpawnRequest request{setup.executable, zygote_argv(setup.workers, 3, setup.modules), setup.envp,
                       STDERR_FILENO, STDERR_FILENO};  // what it prints goes to ddprun's stderr
  request.pass_fd = pair[1];
  auto started = start_process(request);
  ::close(pair[1]);
  if (!started) {
    ::close(pair[0]);
    return started.error().message;
  }
  std::unique_ptr<Zygote> zygote(new Zygote(started->pid, pair[0]));
  auto execed = await_exec(*started, setup.executable);
  if (!execed) {
    zygote->pid_ = -1;  // reaped by await_exec
    return execed.error().message;
  }
  return zygote;
}

std::optional<std::string> Zygote::begin_imports(const ZygoteSetup& setup) {
  // The bootstrap reads its program with one read(): small, a datagram of its own.
  if (!send_datagram(socket_fd_, std::string(kZygoteScript), {})) {
    return fmt::format("cannot send the preloaded interpreter its program: {}",
                       std::strerror(errno));
  }
  // The workers' arguments, so that the modules see the workers' sys.argv while they import.
  int err = 0;
  const std::string why =
      send_request(socket_fd_, dump_json(nlohmann::json{{"args", setup.workers.args}}), {}, err);
  if (!why.empty()) return fmt::format("cannot send the preloaded interpreter its setup: {}", why);
  return std::nullopt;
}

std::optional<std::variant<ZygoteReady, std::string>> Zygote::poll_greeting() {
  std::string hello, why;
  switch (receive_from_zygote(socket_fd_, std::chrono::milliseconds(0), hello, why)) {
    case Received::Timeout:
      return std::nullopt;
    case Received::Closed:
      hung_up_ = true;
      return std::string(fmt::format("the preloaded interpreter failed to start ({})", why));
    case Received::Message:
      break;
  }
  return parse_zygote_hello(hello);
}

Zygote::~Zygote() {
  ::close(socket_fd_);
  if (pid_ > 0) {
    // Its group first: a helper a module started at import, an intermediate, a worker that was
    // forked but never claimed (it has not left the group yet). The number is certainly its
    // while the zygote is unreaped.
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    // Only ours to reap while it has not been reaped by waitpid(-1) (ECHILD then).
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

std::variant<StartedProcess, Zygote::ForkFailure> Zygote::fork_worker(
    const SpawnRequest& request, const PythonInvocation& program) {
  // The claim socket: the worker reports a setup failure on it, waits on it for ddprun's
  // go-ahead (await_exec), and closes it once it runs.
  int report[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, report) != 0)
    return ForkFailure{false, fmt::format("socketpair: {}", std::strerror(errno))};
  std::vector<int> fds{request.stdout_fd >= 0 ? request.stdout_fd : STDOUT_FILENO,
                       request.stderr_fd >= 0 ? request.stderr_fd : STDERR_FILENO, report[1]};
  std::vector<std::string> names{"stdout", "stderr", "report"};
  if (request.cgroup_procs_fd >= 0) {
    fds.push_back(request.cgroup_procs_fd);
    names.push_back("cgroup");
  }
  int err = 0;
  const std::string sent =
      send_request(socket_fd_, worker_description(request, program, names), fds, err);
  ::close(report[1]);
  auto fail = [&](bool died, std::string why) -> std::variant<StartedProcess, ForkFailure> {
    ::close(report[0]);  // a worker forked after all reads EOF and exits unclaimed
    return ForkFailure{died, std::move(why)};
  };
  if (!sent.empty()) {
    const bool died = err == EPIPE || err == ECONNRESET;
    return fail(died, fmt::format("cannot ask the preloaded interpreter for a worker: {}", sent));
  }
  std::string reply, why;
  switch (receive_from_zygote(socket_fd_, kReplyTimeout, reply, why)) {
    case Received::Timeout:
      return fail(false, fmt::format("the preloaded interpreter gave no worker: {}", why));
    case Received::Closed:
      return fail(true, fmt::format("the preloaded interpreter gave no worker: {}", why));
    case Received::Message:
      break;
  }
  auto pid = parse_zygote_reply(reply);
  if (auto* error = std::get_if<std::string>(&pid)) return fail(false, *error);
  // A worker that failed its setup exits by itself (re-parented here, reaped as any child); one
  // that did not answer reads EOF once report[0] is closed and exits unclaimed.
  if (auto why = await_worker_setup(report[0], kReplyTimeout)) return fail(false, *why);
  return StartedProcess{static_cast<pid_t>(std::get<int>(pid)), report[0]};
}

}  // namespace ddp::launcher
