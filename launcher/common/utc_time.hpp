// SPDX-License-Identifier: MIT
#pragma once
/// Wall-clock times as people read them in ddprun's reports and stack dumps: one format for the
/// failure summary (run/), the hang report and the status server (health/).

#include <chrono>
#include <string>

namespace ddp::launcher {

/// "2026-11-30 10:01:02.345 UTC".
std::string format_utc(std::chrono::system_clock::time_point t);

}  // namespace ddp::launcher
