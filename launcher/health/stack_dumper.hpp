// SPDX-License-Identifier: MIT
#pragma once
/// StackDumper: saves where each worker is stuck before ddprun kills it. For each process it
/// runs one tool (concurrently for all processes, each bounded in time) with its output appended
/// to the worker's stacks.txt:
///   - a Python process (its executable's name starts with "python") and py-spy on PATH:
///     `py-spy dump --pid P` (Python frames with file and line);
///   - otherwise `eu-stack -p P` (elfutils), else `gdb -p P -batch -ex "thread apply all bt"`.
/// The tools are the dumper's own: each runs under a keeper started with no exit signal (clone
/// with CLONE_PIDFD), which never execs (exec would give it SIGCHLD again), so the Agent's
/// waitpid(-1) never reaps it; the keeper reaps its tool and ends the same way (exit code or
/// signal). Its end is seen through the pidfd on the loop, the dumper reaps it (waitid on the
/// pidfd) and reports how each tool ended. The Agent leaves the keepers alone while it cleans up
/// (tool_pids()). A keeper still running at the limit is SIGKILLed through the same pidfd, and
/// its tool dies with it (PR_SET_PDEATHSIG). Nothing here blocks the loop.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddp::launcher::health {

struct StackTools {
  std::string py_spy;  // full paths; empty: not installed
  std::string eu_stack;
  std::string gdb;
  /// Looks the tools up in a PATH value.
  static StackTools find(const std::string& path_variable);
};

struct StackTarget {
  int rank = 0;
  pid_t pid = 0;
  std::string output_path;  // stacks.txt
};

struct StackResult {
  int rank = 0;
  pid_t pid = 0;
  std::string output_path;
  std::string tool;        // "py-spy", "eu-stack", "gdb" or "" (none could run)
  bool timed_out = false;  // killed at the limit (the file has what it wrote until then)
  /// How the tool ended: "ok" (exit 0), "exit N", "signal N" (killed, by someone else than
  /// the dumper), "timed out", "cancelled", or "" (no tool ran).
  std::string outcome;
};

/// One way to take a process's stacks: the tool's name and its command line.
struct ToolCommand {
  std::string name;
  std::vector<std::string> argv;
};
/// The tools to try on `pid`, best first: py-spy for a Python process, then eu-stack, then gdb
/// (those installed). A tool that fails hands over to the next.
std::vector<ToolCommand> tool_commands(const StackTools& tools, pid_t pid);

class StackDumper {
 public:
  using Done = std::function<void(std::vector<StackResult>)>;

  StackDumper(boost::asio::io_context& io, StackTools tools, std::chrono::milliseconds limit);
  ~StackDumper();
  StackDumper(const StackDumper&) = delete;
  StackDumper& operator=(const StackDumper&) = delete;

  /// Dumps every target; `done` runs on the loop once all tools ended or were killed. `reason`
  /// goes into each file's header line. One dump at a time (never ptrace a process twice): the
  /// caller waits for busy() to end (HealthMonitor queues behind the running dump).
  void dump(const std::vector<StackTarget>& targets, const std::string& reason, Done done);
  bool busy() const { return running_ != nullptr; }
  /// The tools still running (not leftovers of the workers: the Agent must not kill them).
  std::vector<pid_t> tool_pids() const;
  /// Kills every tool still running and reaps it (ddprun is leaving). `done` is not called.
  void cancel();

 private:
  struct Run;
  boost::asio::io_context& io_;
  StackTools tools_;
  std::chrono::milliseconds limit_;
  std::shared_ptr<Run> running_;
};

/// True when /proc/PID/exe names a Python interpreter.
bool is_python_process(pid_t pid);

}  // namespace ddp::launcher::health
