// SPDX-License-Identifier: MIT
#pragma once
/// The one reader of /proc/<pid>/stat: supervision (process/: parents, groups, zombies), the
/// status beacon (health/: is this pid still the ddprun that wrote the beacon) and the views'
/// per-rank CPU and memory (health/rank_usage.hpp) read it here.

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
  /// Fields 14 + 15 (utime + stime, clock ticks: the process's own CPU time, not its children's)
  /// and 24 (rss, pages). Absent when the line stops before them.
  std::optional<unsigned long long> cpu_ticks;
  std::optional<long long> rss_pages;
};
/// Parses one /proc/<pid>/stat line (the command name may contain spaces and parentheses).
bool parse_proc_stat(const char* text, ProcStat& out);
/// Reads /proc/<pid>/stat; false when the process is gone.
bool read_proc_stat(pid_t pid, ProcStat& out);

}  // namespace ddp::launcher
