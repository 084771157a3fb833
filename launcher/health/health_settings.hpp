// SPDX-License-Identifier: MIT
#pragma once
/// What the health features are asked to do (part of LaunchConfig; see docs/health.md).

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher::health {

struct HealthSettings {
  /// torchrun's file-based watchdog: TORCHELASTIC_ENABLE_FILE_TIMER=1 or --file-timer.
  bool file_timer = false;
  /// TORCHELASTIC_TIMER_FILE when ddprun was given one; else a FIFO in the run directory.
  std::string timer_file;
  /// --hang-timeout; zero: no hang verdict.
  std::chrono::milliseconds hang_timeout{0};
  /// --hang-startup-timeout: the hang timeout until every rank of an attempt has shown progress
  /// (and at most this long after the attempt's start).
  std::chrono::milliseconds hang_startup_timeout{60'000};
  /// --no-progress-restarts K (0: off).
  int no_progress_restarts = 2;
  /// --straggler-ratio R (0: off).
  double straggler_ratio = 0.5;
  /// --status-port (0: a free port) or TORCHELASTIC_HEALTH_CHECK_PORT; nullopt: no endpoint.
  std::optional<int> status_port;
  std::string status_addr = "127.0.0.1";
  /// --status-allow-host: Host header names answered besides the defaults (status_server.hpp).
  std::vector<std::string> status_allow_hosts;
  /// --status-linger: after the end, how long the final state stays served when a viewer asked
  /// for /status during the run (0: not at all).
  std::chrono::milliseconds status_linger{5'000};
  /// Time one stack tool may take for one process.
  std::chrono::milliseconds stack_dump_limit{10'000};
  /// Straggler window (a minute; shorter in tests through DDPRUN_STRAGGLER_WINDOW).
  std::chrono::milliseconds straggler_window{60'000};
};

}  // namespace ddp::launcher::health
