// SPDX-License-Identifier: MIT
#pragma once
/// Starting one worker process. The child gets its own session and process group,
/// PR_SET_PDEATHSIG(SIGKILL) (so `kill -9 ddprun` takes it down), default signal dispositions and
/// an empty signal mask, stdout/stderr on the given pipe ends, and nothing else from ddprun's
/// descriptors.
///
/// Why not Boost.Process v2: its launcher does offer a child-side hook (on_exec_setup), but ddprun
/// is a child subreaper and must reap *every* child (daemonised grandchildren included) with
/// waitpid(-1). Boost.Process waits per pid and would race that reaping for exit statuses. A
/// fork/exec in one file keeps the reaping in one place (process_table.hpp).

#include <sys/resource.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "launcher/common/result.hpp"

namespace ddp::launcher {

struct SpawnRequest {
  std::string executable;         // resolved path, passed to execve
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> envp;  // "NAME=value"
  int stdout_fd = -1;             // child's stdout (-1: inherit)
  int stderr_fd = -1;             // child's stderr (-1: inherit)
  /// A job cgroup to start the child in: its directory (clone3 with CLONE_INTO_CGROUP, which
  /// costs nothing) and its cgroup.procs (where clone3 is refused, e.g. by a seccomp filter, the
  /// forked child moves itself in before anything else, which costs a cgroup migration).
  int cgroup_dir_fd = -1;
  int cgroup_procs_fd = -1;
  std::vector<int> cpu_affinity{};  // --numa-binding: the child's CPUs (empty: inherit)
  int preferred_memory_node = -1;   // --numa-binding: MPOL_PREFERRED node (-1: inherit)
  int pass_fd = -1;  // kept open in the child as descriptor 3 (the zygote's socket, zygote.hpp)
};

/// A forked child that may still be on its way to exec.
struct StartedProcess {
  pid_t pid = -1;           // also the child's process group id
  int exec_report_fd = -1;  // reads EOF once exec succeeded, or the child's errno if it failed
};

/// ddprun raised its own soft RLIMIT_NOFILE (many connections); workers start with `soft`, the
/// limit ddprun was started with, as under torchrun.
void set_worker_fd_soft_limit(rlim_t soft);

/// Forks; the child sets itself up and execs. Does not wait for the exec, so that several
/// workers can be started back to back. A failing fork is an Error with exit code 70.
Result<StartedProcess> start_process(const SpawnRequest& request);

/// Waits until the child has exec'd (or failed to) and closes the report fd. A worker forked by
/// the zygote (its report fd a socket) is given its go-ahead first: call this only once its pid
/// is recorded. Returns the pid;
/// an exec failure (ENOENT, EACCES...) is an Error with exit code 127 and the child is reaped;
/// a child that could not enter its job cgroup is an Error with exit code 70.
Result<pid_t> await_exec(const StartedProcess& started, const std::string& executable);

}  // namespace ddp::launcher
