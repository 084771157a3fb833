// SPDX-License-Identifier: MIT
#pragma once
/// The health flags as typed, and their validation into HealthSettings. Pure (the environment is
/// passed in): TORCHELASTIC_ENABLE_FILE_TIMER, TORCHELASTIC_TIMER_FILE and
/// TORCHELASTIC_HEALTH_CHECK_PORT are torchrun's variables, honoured as torchrun does.

#include <map>
#include <string>

#include "launcher/common/result.hpp"
#include "launcher/health/health_settings.hpp"

namespace ddp::launcher::health {

struct RawHealthOptions {
  bool file_timer = false;
  std::string hang_timeout = "0";
  std::string hang_startup_timeout = "60";
  std::string no_progress_restarts = "2";
  std::string straggler_ratio = "0.5";
  std::string status_port;  // empty: TORCHELASTIC_HEALTH_CHECK_PORT, else no endpoint
  std::string status_addr = "127.0.0.1";
  std::string status_allow_host;    // comma-separated names
  std::string status_linger = "5";  // seconds
};

/// Errors carry exit code 2 and name the flag.
Result<HealthSettings> health_settings_from(const RawHealthOptions& raw,
                                            const std::map<std::string, std::string>& environment);

}  // namespace ddp::launcher::health
