// SPDX-License-Identifier: MIT
#pragma once
/// Zygote: a preloaded Python interpreter (--preload) that forks workers instead of ddprun
/// exec'ing them, so that a worker starts with `import torch` already done.
///
/// ddprun starts it like a worker (spawn.hpp: own session, PDEATHSIG, clean descriptors) with one
/// end of a SOCK_SEQPACKET socketpair as its descriptor 3, puts it in the run's cgroup (spawn()
/// then the caller's adoption, before it runs anything of the modules, so that whatever they start
/// at import is the run's too), and sends it its program (zygote_script.hpp). It imports the
/// modules without ddprun waiting (the socket turns readable when it has answered), refuses if
/// that failed, left threads or child processes or initialised CUDA, and then waits.
///
/// Every request to it (its setup, each worker) is JSON in a memfd passed as the first SCM_RIGHTS
/// descriptor beside a small header, so that no argv or environment is too large for a datagram.
/// A worker's request carries everything ddprun's exec path applies (spawn.hpp's SpawnRequest,
/// field by field: worker_description()), with the worker's stdout, stderr, its claim socket and
/// the job cgroup's cgroup.procs as descriptors. The zygote forks an intermediate that forks the
/// worker and exits: the worker is re-parented to ddprun (the subreaper), sets PR_SET_PDEATHSIG,
/// enters the cgroup, resets its process state and then waits on the claim socket. ddprun
/// records its pid and only then sends the go-ahead (await_exec() in spawn.hpp): a worker whose
/// pid ddprun never learnt (the zygote died between the fork and its answer) reads EOF and exits
/// without running any user code. Once it has the go-ahead it closes the socket, which await_exec()
/// reads as a successful exec; from then on it is an ordinary child of ddprun.
///
/// The zygote is never waited for long: its answer to a worker request is bounded (a stopped or
/// silent zygote is given up within kReplyTimeout), and whatever goes wrong with it (death, a bad
/// answer, a descriptor ddprun cannot make) makes that worker exec'd, never a failed start.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launcher/process/spawn.hpp"
#include "launcher/process/zygote_plan.hpp"

namespace ddp::launcher {

struct ZygoteSetup {
  std::string executable;            // the resolved interpreter, as for the workers
  PythonInvocation workers;          // the workers' command line (its interpreter and flags)
  std::vector<std::string> modules;  // --preload
  std::vector<std::string> envp;     // the zygote's environment ("NAME=value")
  std::chrono::milliseconds ready_timeout{300'000};  // --preload-timeout: for the imports
  /// Called with each (re)spawned zygote's pid before it imports anything (the job cgroup, the
  /// orphan guard).
  std::function<void(pid_t)> on_spawned;
};

class Zygote {
 public:
  /// A stopped or silent zygote is given up after this long without an answer to a request.
  static constexpr std::chrono::milliseconds kReplyTimeout{2000};

  /// Starts the interpreter (its exec confirmed); it waits for its program. The zygote, or the
  /// one-line reason there is none.
  static std::variant<std::unique_ptr<Zygote>, std::string> spawn(const ZygoteSetup& setup);
  /// Sends it its program and setup: it starts importing. nullopt, or why not.
  std::optional<std::string> begin_imports(const ZygoteSetup& setup);
  /// Readable once the zygote has answered its imports (or died).
  int socket_fd() const { return socket_fd_; }
  /// Without waiting: nullopt while it is still importing, else ready or why it cannot be used.
  std::optional<std::variant<ZygoteReady, std::string>> poll_greeting();
  /// poll_greeting() found its socket closed: it died (or exited) rather than refused.
  bool hung_up() const { return hung_up_; }

  /// SIGKILLs its process group (what it started at import, a worker not yet claimed) and it,
  /// and reaps it.
  ~Zygote();
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  pid_t pid() const { return pid_; }
  /// waitpid(-1) reaped it: nothing left to kill (its pid may be reused).
  void reaped() { pid_ = -1; }

  /// Why a fork failed: `died` (its socket closed) asks for a fresh zygote; otherwise (no answer
  /// in time, a bad answer, a local error) this one is not to be trusted again.
  struct ForkFailure {
    bool died = false;
    std::string why;
  };
  /// Has the zygote fork a worker for `request` (its argv must parse as `program`). The pid is
  /// ddprun's child once this returns; the report fd behaves as start_process()'s, and
  /// await_exec() sends the go-ahead on it.
  std::variant<StartedProcess, ForkFailure> fork_worker(const SpawnRequest& request,
                                                        const PythonInvocation& program);

 private:
  Zygote(pid_t pid, int socket_fd) : pid_(pid), socket_fd_(socket_fd) {}
  pid_t pid_;
  int socket_fd_;
  bool hung_up_ = false;
};

/// The worker request's JSON: every field of `request` that the exec path applies in the child
/// (spawn_posix.cpp), plus what an exec'd interpreter takes from its parent (cwd, umask). Pure
/// but for reading the cwd and umask; kept beside SpawnRequest's fields so that a new one is
/// added to both paths at once.
std::string worker_description(const SpawnRequest& request, const PythonInvocation& program,
                               const std::vector<std::string>& fd_names);

}  // namespace ddp::launcher
