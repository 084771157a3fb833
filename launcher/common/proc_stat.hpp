// SPDX-License-Identifier: MIT
#pragma once
/// The one reader of /proc/<pid>/stat: supervision (process/: parents, groups, zombies) and the
/// status beacon (health/: is this pid still the ddprun that wrote the beacon) read it here.

#include <sys/types.h>

#include <optional>

namespace ddp::launcher {

/// /proc/<pid>/stat fields ddprun needs; parsed from the text so that it can be unit-tested.
struct ProcStat {
  pid_t pid = 0;
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  /// Field 22, clock ticks after boot: with the pid, it names one process (a reused pid has
  /// another). Absent when the line stops before it.
  std::optional<unsigned long long> start_time;
};
/// Parses one /proc/<pid>/stat line (the command name may contain spaces and parentheses).
bool parse_proc_stat(const char* text, ProcStat& out);
/// Reads /proc/<pid>/stat; false when the process is gone.
bool read_proc_stat(pid_t pid, ProcStat& out);

}  // namespace ddp::launcher
