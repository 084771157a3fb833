// SPDX-License-Identifier: MIT
#include "launcher/process/zygote.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launcher/common/exit_codes.hpp"
#include "launcher/process/zygote_script.hpp"
#include "rendezvous/json_text.hpp"

namespace ddp::launcher {
namespace {

constexpr auto kZygoteReplyTimeout = std::chrono::seconds(30);
constexpr size_t kMaxZygoteMessage = 1 << 20;

/// Waits for one message; empty with `why` set on timeout, EOF or error.
std::string receive_from_zygote(int fd, std::chrono::milliseconds timeout, std::string& why) {
  pollfd p{fd, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) {
    why = fmt::format("no answer within {} s", timeout.count() / 1000);
    return {};
  }
  std::string buffer(kMaxZygoteMessage, '\0');
  ssize_t n;
  do {
    n = ::recv(fd, buffer.data(), buffer.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    why = n == 0 ? "it exited" : std::strerror(errno);
    return {};
  }
  buffer.resize(static_cast<size_t>(n));
  return buffer;
}

bool send_to_zygote(int fd, const std::string& message, const std::vector<int>& fds) {
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
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(message.size());
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

std::variant<std::unique_ptr<Zygote>, std::string> Zygote::start(const ZygoteSetup& setup) {
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
  if (!send_to_zygote(zygote->socket_fd_, std::string(kZygoteScript), {}))
    return fmt::format("cannot send the preloaded interpreter its program: {}",
                       std::strerror(errno));
  std::string why;
  const std::string hello = receive_from_zygote(zygote->socket_fd_, setup.ready_timeout, why);
  if (hello.empty()) return fmt::format("the preloaded interpreter failed to start ({})", why);
  auto ready = parse_zygote_hello(hello);
  if (auto* reason = std::get_if<std::string>(&ready)) return *reason;
  zygote->import_seconds_ = std::get<ZygoteReady>(ready).import_seconds;
  return zygote;
}

Zygote::~Zygote() {
  ::close(socket_fd_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    // Only ours to reap while it has not been reaped by waitpid(-1) (ECHILD then).
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

Result<StartedProcess> Zygote::fork_worker(const SpawnRequest& request,
                                           const PythonInvocation& program) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    return Error{exit_codes::kInternal, fmt::format("pipe: {}", std::strerror(errno))};
  std::vector<int> fds{request.stdout_fd >= 0 ? request.stdout_fd : STDOUT_FILENO,
                       request.stderr_fd >= 0 ? request.stderr_fd : STDERR_FILENO, report[1]};
  nlohmann::json names = {"stdout", "stderr", "report"};
  if (request.cgroup_procs_fd >= 0) {
    fds.push_back(request.cgroup_procs_fd);
    names.push_back("cgroup");
  }
  const nlohmann::json message = {{"mode", program.mode},         {"target", program.target},
                                  {"args", program.args},         {"orig_argv", request.argv},
                                  {"env", request.envp},          {"cwd", current_directory()},
                                  {"umask", read_umask()},        {"parent", ::getpid()},
                                  {"cpus", request.cpu_affinity}, {"fds", names}};
  const bool sent = send_to_zygote(socket_fd_, dump_json(message), fds);
  const int send_errno = errno;
  ::close(report[1]);
  auto fail = [&](std::string why) -> Result<StartedProcess> {
    ::close(report[0]);
    return Error{exit_codes::kInternal, std::move(why)};
  };
  if (!sent) {
    return fail(fmt::format("cannot ask the preloaded interpreter for a worker: {}",
                            std::strerror(send_errno)));
  }
  std::string why;
  const std::string reply = receive_from_zygote(socket_fd_, kZygoteReplyTimeout, why);
  if (reply.empty()) return fail(fmt::format("the preloaded interpreter gave no worker ({})", why));
  auto pid = parse_zygote_reply(reply);
  if (auto* error = std::get_if<std::string>(&pid)) return fail(*error);
  return StartedProcess{static_cast<pid_t>(std::get<int>(pid)), report[0]};
}

}  // namespace ddp::launcher
