// SPDX-License-Identifier: MIT
#pragma once
/// Per-rank CPU and memory for the views (docs/health.md, "CPU and memory"): the monitor reads
/// each live worker's /proc/<pid>/stat once a second (launcher/common/proc_stat) and notes the
/// reading here; CPU% is the CPU time the process used between two readings over the time between
/// them (100 = one core busy; a rank's own threads add up, its child processes do not), memory
/// its resident set. Pure: the readings and the clock are the caller's.

#include <cstddef>
#include <optional>
#include <vector>

namespace ddp::launcher::health {

struct RankUsage {
  std::optional<double> cpu_percent;  // none before the second reading of a process
  std::optional<long long> rss_bytes;
  bool operator==(const RankUsage&) const = default;
};

class UsageMeter {
 public:
  /// `ticks_per_s`: sysconf(_SC_CLK_TCK); `page_bytes`: sysconf(_SC_PAGESIZE).
  UsageMeter(long ticks_per_s, long page_bytes);
  /// A new attempt: `ranks` local ranks, none read yet.
  void reset(size_t ranks);
  /// A reading of `local_rank`'s process `pid` at `now_s` (a process that is gone or unreadable:
  /// both nullopt, and its usage is unknown again). Another pid starts afresh.
  void note(size_t local_rank, long long pid, std::optional<unsigned long long> cpu_ticks,
            std::optional<long long> rss_pages, double now_s);
  RankUsage usage(size_t local_rank) const;

 private:
  struct Last {
    long long pid = 0;
    std::optional<unsigned long long> ticks;
    double at_s = 0;
    RankUsage usage;
  };
  long ticks_per_s_;
  long page_bytes_;
  std::vector<Last> last_;
};

}  // namespace ddp::launcher::health
