// SPDX-License-Identifier: MIT
#pragma once
/// The kernel-facing side of supervision: becoming a child subreaper, reaping every exited child,
/// finding the children ddprun has inherited (orphaned grandchildren), and signalling groups.
/// Owns nothing; the Agent decides what to do with the pids.

#include <sys/types.h>

#include <vector>

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

/// /proc/<pid>/stat fields ddprun needs; parsed from the text so that it can be unit-tested.
struct ProcStat {
  pid_t pid = 0;
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
};
/// Parses one /proc/<pid>/stat line (the command name may contain spaces and parentheses).
bool parse_proc_stat(const char* text, ProcStat& out);
/// Reads /proc/<pid>/stat; false when the process is gone.
bool read_proc_stat(pid_t pid, ProcStat& out);

}  // namespace ddp::launcher
