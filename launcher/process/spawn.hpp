// SPDX-License-Identifier: MIT
#pragma once
/// Starting one worker process. The child gets its own process group, PR_SET_PDEATHSIG(SIGKILL)
/// (so `kill -9 ddprun` takes it down), default signal dispositions and an empty signal mask,
/// stdout/stderr on the given pipe ends, and nothing else from ddprun's descriptors.
///
/// Why not Boost.Process v2: its launcher does offer a child-side hook (on_exec_setup), but ddprun
/// is a child subreaper and must reap *every* child (daemonised grandchildren included) with
/// waitpid(-1). Boost.Process waits per pid and would race that reaping for exit statuses. A
/// fork/exec in one file keeps the reaping in one place (process_table.hpp).

#include <sys/types.h>

#include <string>
#include <vector>

#include "launcher/common/result.hpp"

namespace ddp::launcher {

struct SpawnRequest {
  std::string executable;              // resolved path, passed to execve
  std::vector<std::string> argv;       // argv[0] included
  std::vector<std::string> envp;       // "NAME=value"
  int stdout_fd = -1;                  // child's stdout (-1: inherit)
  int stderr_fd = -1;                  // child's stderr (-1: inherit)
};

/// Forks and execs. Returns the pid (which is also the worker's process group id) once exec has
/// succeeded; an exec failure (ENOENT, EACCES...) is an Error with exit code 127, and the failed
/// child is already reaped. A failing fork is an Error with exit code 70.
Result<pid_t> spawn_process(const SpawnRequest& request);

}  // namespace ddp::launcher
