// SPDX-License-Identifier: MIT
#include "launcher/health/health_options.hpp"

#include <fmt/format.h>

#include "common/exit_codes.hpp"
#include "launcher/common/value_parsers.hpp"

namespace ddp::launcher::health {

Result<HealthSettings> health_settings_from(const RawHealthOptions& raw,
                                            const std::map<std::string, std::string>& environment) {
  auto env = [&](const char* name) -> std::string {
    auto it = environment.find(name);
    return it == environment.end() ? std::string() : it->second;
  };
  HealthSettings s;
  s.file_timer = raw.file_timer || env("TORCHELASTIC_ENABLE_FILE_TIMER") == "1";
  s.timer_file = env("TORCHELASTIC_TIMER_FILE");
  auto hang = parse_seconds("--hang-timeout", raw.hang_timeout);
  if (!hang) return hang.error();
  if (*hang > 0 && *hang < 0.1) {
    return Error{exit_codes::kUsage, "--hang-timeout: at least 0.1 seconds (0 turns it off)"};
  }
  s.hang_timeout = std::chrono::milliseconds(static_cast<long long>(*hang * 1000.0));
  auto startup = parse_seconds("--hang-startup-timeout", raw.hang_startup_timeout);
  if (!startup) return startup.error();
  s.hang_startup_timeout = std::chrono::milliseconds(static_cast<long long>(*startup * 1000.0));
  auto restarts = parse_integer("--no-progress-restarts", raw.no_progress_restarts, 0, 1'000'000);
  if (!restarts) return restarts.error();
  s.no_progress_restarts = static_cast<int>(*restarts);
  auto ratio = parse_seconds("--straggler-ratio", raw.straggler_ratio);
  if (!ratio || *ratio >= 1.0) {
    return Error{exit_codes::kUsage,
                 fmt::format("--straggler-ratio: '{}' is not a number in [0, 1) (0 turns it off)",
                             raw.straggler_ratio)};
  }
  s.straggler_ratio = *ratio;
  std::string port_text = raw.status_port;
  const char* port_flag = "--status-port";
  if (port_text.empty() && !env("TORCHELASTIC_HEALTH_CHECK_PORT").empty()) {
    port_text = env("TORCHELASTIC_HEALTH_CHECK_PORT");
    port_flag = "TORCHELASTIC_HEALTH_CHECK_PORT";
  }
  if (!port_text.empty()) {
    auto port = parse_integer(port_flag, port_text, 0, 65535);
    if (!port) return port.error();
    s.status_port = static_cast<int>(*port);
  }
  if (raw.status_addr.empty()) return Error{exit_codes::kUsage, "--status-addr: empty address"};
  s.status_addr = raw.status_addr;
  for (size_t start = 0; start <= raw.status_allow_host.size();) {
    size_t comma = raw.status_allow_host.find(',', start);
    if (comma == std::string::npos) comma = raw.status_allow_host.size();
    std::string name = raw.status_allow_host.substr(start, comma - start);
    if (!name.empty()) s.status_allow_hosts.push_back(std::move(name));
    start = comma + 1;
  }
  auto linger = parse_seconds("--status-linger", raw.status_linger);
  if (!linger) return linger.error();
  if (*linger > 600) {
    return Error{exit_codes::kUsage, "--status-linger: at most 600 seconds (0 turns it off)"};
  }
  s.status_linger = std::chrono::milliseconds(static_cast<long long>(*linger * 1000.0));
  if (auto window = env("DDPRUN_STRAGGLER_WINDOW"); !window.empty()) {
    // For tests and experiments: the straggler window in seconds (a minute by default).
    auto seconds = parse_seconds("DDPRUN_STRAGGLER_WINDOW", window);
    if (!seconds) return seconds.error();
    if (*seconds < 1) {
      return Error{exit_codes::kUsage,
                   fmt::format("DDPRUN_STRAGGLER_WINDOW: '{}' is under 1 second", window)};
    }
    s.straggler_window = std::chrono::milliseconds(static_cast<long long>(*seconds * 1000.0));
  }
  return s;
}

}  // namespace ddp::launcher::health
