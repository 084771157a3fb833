// SPDX-License-Identifier: MIT
#pragma once
/// FakeProcessControl: a scripted stand-in for the kernel, so that the Agent's decisions (who is
/// the root cause, who gets which signal, when to restart, when to stop) are tested without real
/// processes or timing. A script decides, per started worker, how it behaves; exits are queued and
/// announced with a real SIGCHLD to this process, exactly as the kernel would.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/env/worker_env.hpp"
#include "launcher/process/process_control.hpp"
#include "launcher/status/exit_status.hpp"

namespace ddp::launcher::testing {

struct FakeBehaviour {
  std::optional<ExitStatus> exits_with;  // ends on its own right after starting
  bool ignores_sigterm = false;          // only SIGKILL ends it
  bool exec_fails = false;               // exec reports ENOENT
  bool leaves_orphan = false;            // when it dies, a re-parented orphan stays behind
};

struct FakeStart {
  pid_t pid = 0;
  EnvMap env;
};

class FakeProcessControl final : public ProcessControl {
 public:
  using Script = std::function<FakeBehaviour(const EnvMap&)>;
  explicit FakeProcessControl(Script script) : script_(std::move(script)) {}

  std::vector<FakeStart> starts;                     // every start(), in order
  std::vector<std::pair<pid_t, int>> signals;        // (pgid, signal) sent to live workers
  std::vector<std::pair<pid_t, int>> group_signals;  // (pgid, signal) sent to dead workers' groups
  std::vector<std::pair<pid_t, int>> process_signals;  // signal_process() calls
  bool supervising = false;
  std::vector<size_t> attempt_ends;  // starts.size() at each end_attempt()

  std::vector<std::string> begin_supervision(const std::string&, const std::string&) override {
    supervising = true;
    return {};
  }
  void end_supervision() override { supervising = false; }
  void end_attempt() override { attempt_ends.push_back(starts.size()); }

  Result<StartedProcess> start(const SpawnRequest& request) override {
    pid_t pid = next_pid_++;
    EnvMap env;
    for (const auto& entry : request.envp) {
      auto eq = entry.find('=');
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    starts.push_back({pid, env});
    behaviour_[pid] = script_(env);
    live_.insert(pid);
    return StartedProcess{pid, ::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  }

  Result<pid_t> await_exec(const StartedProcess& started, const std::string& executable) override {
    ::close(started.exec_report_fd);
    const FakeBehaviour& b = behaviour_[started.pid];
    if (b.exec_fails) {
      live_.erase(started.pid);
      return Error{127, "cannot execute '" + executable + "': No such file or directory"};
    }
    if (b.exits_with) die(started.pid, *b.exits_with);
    return started.pid;
  }

  void watch_group(pid_t) override {}

  std::vector<ReapedChild> reap_exited() override { return std::exchange(exited_, {}); }

  std::vector<pid_t> live_children() override {
    std::vector<pid_t> out(live_.begin(), live_.end());
    out.insert(out.end(), orphans_.begin(), orphans_.end());
    return out;
  }

  void signal_worker(pid_t pgid, int sig) override {
    signals.emplace_back(pgid, sig);
    if (!live_.count(pgid) || sig == SIGCONT) return;
    if (sig == SIGKILL || !(sig == SIGTERM && behaviour_[pgid].ignores_sigterm)) {
      die(pgid, ExitStatus::signaled(sig));
    }
  }

  void signal_group(pid_t pgid, int sig) override { group_signals.emplace_back(pgid, sig); }

  void signal_process(pid_t pid, int sig) override {
    process_signals.emplace_back(pid, sig);
    if (sig == SIGKILL && orphans_.erase(pid)) queue(pid, ExitStatus::signaled(SIGKILL));
  }

  /// Signals sent to worker `pid` (or its group), in order.
  std::vector<int> signals_to(pid_t pid) const {
    std::vector<int> out;
    for (auto [target, sig] : signals) {
      if (target == pid) out.push_back(sig);
    }
    return out;
  }

 private:
  void die(pid_t pid, const ExitStatus& status) {
    live_.erase(pid);
    if (behaviour_[pid].leaves_orphan) orphans_.insert(pid + 50'000);
    queue(pid, status);
  }

  void queue(pid_t pid, const ExitStatus& status) {
    int wait_status =
        status.kind == ExitStatus::Kind::Exited ? (status.code & 0xff) << 8 : status.signal;
    exited_.push_back({pid, wait_status});
    // The kernel's notification; raised twice, because SIGCHLDs coalesce and arrive late, and
    // a spurious one must change nothing.
    ::kill(::getpid(), SIGCHLD);
    ::kill(::getpid(), SIGCHLD);
  }

  Script script_;
  pid_t next_pid_ = 40'000;
  std::map<pid_t, FakeBehaviour> behaviour_;
  std::set<pid_t> live_;
  std::set<pid_t> orphans_;
  std::vector<ReapedChild> exited_;
};

/// The global rank and the restart count a fake worker was started with (its environment).
inline int rank_of(const EnvMap& env) { return std::stoi(env.at("RANK")); }
inline int attempt_of(const EnvMap& env) { return std::stoi(env.at("TORCHELASTIC_RESTART_COUNT")); }

}  // namespace ddp::launcher::testing
