// SPDX-License-Identifier: MIT
#pragma once
/// The kernel-facing side of supervision: becoming a child subreaper, reaping every exited child,
/// finding the children ddprun has inherited (orphaned grandchildren), and signalling groups.
/// Owns nothing; the Agent decides what to do with the pids.

#include <sys/types.h>

#include <vector>

#include "launcher/common/proc_stat.hpp"  // ProcStat, read_proc_stat: the /proc reader they use

namespace ddp::launcher {

/// PR_SET_CHILD_SUBREAPER: orphaned descendants are re-parented to ddprun instead of init, so
/// they can be found and killed. Returns false if the kernel refused.
bool become_child_subreaper();

struct ReapedChild {
  pid_t pid = 0;
  int wait_status = 0;
};

/// waitpid(-1, WNOHANG) until nothing is left to reap. Never blocks.
std::vector<ReapedChild> reap_exited_children();

/// Live children of this process, from /proc (workers and inherited orphans alike), and zombie
/// children that had left this process's session (see signal_process: their group is signalled).
std::vector<pid_t> list_children();

/// Sends `sig` to process group `pgid`; falls back to the process itself if the group is gone.
void signal_group(pid_t pgid, int sig);

}  // namespace ddp::launcher
