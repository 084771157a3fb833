// SPDX-License-Identifier: MIT
#pragma once
/// Zygote: a preloaded Python interpreter (--preload) that forks workers instead of ddprun
/// exec'ing them, so that a worker starts with `import torch` already done.
///
/// ddprun starts it like a worker (spawn.hpp: own session, PDEATHSIG, clean descriptors) with one
/// end of a SOCK_SEQPACKET socketpair as its descriptor 3, and sends it its program
/// (zygote_script.hpp). It imports the modules, refuses if that failed, left threads or initialised
/// CUDA, and then waits. For each worker ddprun sends the argv, the environment, the cwd and the
/// umask as JSON, with the worker's stdout, stderr, its exec-report pipe and the job cgroup's
/// cgroup.procs as SCM_RIGHTS descriptors (Asio's sockets carry no ancillary data, hence raw
/// sendmsg with bounded poll waits). The zygote forks an intermediate that forks the worker and
/// exits: the worker is re-parented to ddprun (the subreaper), sets PR_SET_PDEATHSIG once ddprun
/// is its parent, enters the cgroup, resets its process state and closes the report pipe, which
/// await_exec() reads as a successful exec. From then on it is an ordinary child of ddprun.
///
/// The zygote itself stays out of the attempts' cgroups (each emptied at the end of its attempt;
/// PosixProcessControl puts it beside them); it carries the run's token for the orphan guard, dies
/// with ddprun (PDEATHSIG) and is killed when this object goes.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/process/spawn.hpp"
#include "launcher/process/zygote_plan.hpp"

namespace ddp::launcher {

struct ZygoteSetup {
  std::string executable;            // the resolved interpreter, as for the workers
  PythonInvocation workers;          // the workers' command line (its interpreter and flags)
  std::vector<std::string> modules;  // --preload
  std::vector<std::string> envp;     // the zygote's environment ("NAME=value")
  std::chrono::milliseconds ready_timeout{300'000};  // for the imports, on a loaded machine
};

class Zygote {
 public:
  /// Starts the interpreter and waits until it has imported the modules: the zygote, or the
  /// one-line reason it cannot be used (it is then gone).
  static std::variant<std::unique_ptr<Zygote>, std::string> start(const ZygoteSetup& setup);
  /// SIGKILLs and reaps it.
  ~Zygote();
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  pid_t pid() const { return pid_; }
  /// waitpid(-1) reaped it: nothing left to kill (its pid may be reused).
  void reaped() { pid_ = -1; }
  double import_seconds() const { return import_seconds_; }

  /// Has the zygote fork a worker for `request` (its argv must parse as `program`). The pid is
  /// ddprun's child once this returns; the report fd behaves as start_process()'s.
  Result<StartedProcess> fork_worker(const SpawnRequest& request, const PythonInvocation& program);

 private:
  Zygote(pid_t pid, int socket_fd) : pid_(pid), socket_fd_(socket_fd) {}
  pid_t pid_;
  int socket_fd_;
  double import_seconds_ = 0;
};

}  // namespace ddp::launcher
