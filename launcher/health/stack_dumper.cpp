// SPDX-License-Identifier: MIT
#include "launcher/health/stack_dumper.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "launcher/run/failure_report.hpp"

extern char** environ;

namespace ddp::launcher::health {
namespace {

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

void append_line(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
  ::close(fd);
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

/// One dump: a tool per target, a shared deadline, and the callback once the last one ends.
struct StackDumper::Run : std::enable_shared_from_this<StackDumper::Run> {
  struct Tool {
    std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd;
    bool ended = false;
  };
  explicit Run(boost::asio::io_context& io) : deadline(io) {}
  boost::asio::steady_timer deadline;
  std::vector<Tool> tools;
  std::vector<StackResult> results;
  size_t pending = 0;
  bool cancelled = false;
  Done done;

  void ended(size_t i) {
    if (tools[i].ended) return;
    tools[i].ended = true;
    boost::system::error_code ignored;
    if (tools[i].pidfd) tools[i].pidfd->close(ignored);
    if (--pending == 0) finish();
  }
  void finish() {
    deadline.cancel();
    if (!cancelled && done) {
      Done d = std::move(done);
      d(std::move(results));
    }
  }
  void kill_all(bool timed_out) {
    for (size_t i = 0; i < tools.size(); ++i) {
      if (tools[i].ended || !tools[i].pidfd) continue;
      pidfd_send_signal(tools[i].pidfd->native_handle(), SIGKILL);
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

void StackDumper::cancel() {
  if (!running_) return;
  running_->cancelled = true;
  running_->kill_all(false);
  running_->deadline.cancel();
  running_.reset();
}

void StackDumper::dump(const std::vector<StackTarget>& targets, const std::string& reason,
                       Done done) {
  auto run = std::make_shared<Run>(io_);
  run->done = std::move(done);
  const bool refuse = busy();
  const std::string when = format_utc(std::chrono::system_clock::now());
  for (const auto& t : targets) {
    StackResult result{t.rank, t.pid, t.output_path, "", false};
    std::vector<std::string> argv;
    if (refuse) {
      // Another dump is running for these very processes; say so rather than ptrace twice.
    } else if (!tools_.py_spy.empty() && is_python_process(t.pid)) {
      result.tool = "py-spy";
      argv = {tools_.py_spy, "dump", "--pid", std::to_string(t.pid)};
    } else if (!tools_.eu_stack.empty()) {
      result.tool = "eu-stack";
      argv = {tools_.eu_stack, "-p", std::to_string(t.pid)};
    } else if (!tools_.gdb.empty()) {
      result.tool = "gdb";
      argv = {tools_.gdb,           "-nx", "-batch", "-p", std::to_string(t.pid), "-ex",
              "thread apply all bt"};
    }
    append_line(t.output_path,
                fmt::format("# ddprun: stacks of rank {} (pid {}) at {} ({}){}\n", t.rank, t.pid,
                            when, reason, result.tool.empty() ? "" : ", by " + result.tool));
    Run::Tool tool;
    if (!argv.empty()) {
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
      posix_spawn_file_actions_addopen(&actions, 1, t.output_path.c_str(),
                                       O_WRONLY | O_CREAT | O_APPEND, 0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
      std::vector<char*> args;
      args.reserve(argv.size() + 1);
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      pid_t pid = -1;
      int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
      posix_spawn_file_actions_destroy(&actions);
      int fd = rc == 0 ? pidfd_open(pid) : -1;
      if (fd >= 0) {
        tool.pidfd = std::make_unique<boost::asio::posix::stream_descriptor>(io_, fd);
      } else {
        // Could not start, or it already ended and was reaped: nothing to wait for.
        if (rc != 0) {
          append_line(t.output_path,
                      fmt::format("# ddprun: cannot run {}: {}\n", argv[0], std::strerror(rc)));
        }
        tool.ended = true;
      }
    } else {
      append_line(t.output_path, refuse
                                     ? "# ddprun: another stack dump is running\n"
                                     : "# ddprun: no stack tool found (py-spy, eu-stack, gdb)\n");
      tool.ended = true;
    }
    run->results.push_back(std::move(result));
    run->tools.push_back(std::move(tool));
  }
  for (const auto& t : run->tools) {
    if (!t.ended) ++run->pending;
  }
  if (run->pending == 0) {
    boost::asio::post(io_, [run] { run->finish(); });
    return;
  }
  running_ = run;
  for (size_t i = 0; i < run->tools.size(); ++i) {
    if (run->tools[i].ended) continue;
    // A pidfd becomes readable when its process ends.
    run->tools[i].pidfd->async_wait(boost::asio::posix::descriptor_base::wait_read,
                                    [this, run, i](const boost::system::error_code& ec) {
                                      if (ec || run->cancelled) return;
                                      // Not busy any more once `done` runs: it may dump again.
                                      if (run->pending == 1 && running_ == run) running_.reset();
                                      run->ended(i);
                                    });
  }
  run->deadline.expires_after(limit_);
  run->deadline.async_wait([run](const boost::system::error_code& ec) {
    if (!ec) run->kill_all(true);  // their pidfds turn readable next: ended() follows
  });
}

}  // namespace ddp::launcher::health
