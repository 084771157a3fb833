// SPDX-License-Identifier: MIT
#include "launcher/health/rank_usage.hpp"

#include <algorithm>
#include <cmath>

namespace ddp::launcher::health {

UsageMeter::UsageMeter(long ticks_per_s, long page_bytes)
    : ticks_per_s_(std::max(1L, ticks_per_s)), page_bytes_(std::max(1L, page_bytes)) {}

void UsageMeter::reset(size_t ranks) { last_.assign(ranks, Last{}); }

void UsageMeter::note(size_t local_rank, long long pid, std::optional<unsigned long long> cpu_ticks,
                      std::optional<long long> rss_pages, double now_s) {
  if (local_rank >= last_.size()) return;
  Last& last = last_[local_rank];
  if (last.pid != pid) last = Last{pid, std::nullopt, 0, {}};
  last.usage.rss_bytes =
      rss_pages && *rss_pages >= 0 ? std::optional(*rss_pages * page_bytes_) : std::nullopt;
  if (!cpu_ticks) {  // gone: nothing is known about it any more
    last = Last{pid, std::nullopt, 0, {}};
    return;
  }
  const double elapsed = now_s - last.at_s;
  if (last.ticks && *cpu_ticks >= *last.ticks && elapsed > 0) {
    const double used_s = static_cast<double>(*cpu_ticks - *last.ticks) / ticks_per_s_;
    last.usage.cpu_percent = std::round(used_s / elapsed * 1000) / 10;  // tenths of a percent
  } else if (last.ticks) {
    last.usage.cpu_percent.reset();  // a clock or counter that went back: no guess
  }
  last.ticks = cpu_ticks;
  last.at_s = now_s;
}

RankUsage UsageMeter::usage(size_t local_rank) const {
  return local_rank < last_.size() ? last_[local_rank].usage : RankUsage{};
}

}  // namespace ddp::launcher::health
