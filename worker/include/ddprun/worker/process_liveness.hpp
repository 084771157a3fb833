// SPDX-License-Identifier: MIT
#pragma once
/// Whether a process on this host still runs: the peers' liveness checks of the shared-memory
/// all-reduce and the clean-up of files and segments that killed processes left behind.

#include <string>

namespace ddp::worker {

/// Whether a process is gone for good (no such pid, or a zombie nobody has reaped yet).
bool process_is_dead(int pid);

/// This host's name (gethostname), "localhost" when it has none.
std::string this_host_name();

/// Where a pid means this process: "<host>/<pid namespace inode>". Two processes can check each
/// other's pids only when their scopes are equal.
std::string pid_scope();

}  // namespace ddp::worker
