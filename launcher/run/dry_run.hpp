// SPDX-License-Identifier: MIT
#pragma once
/// --dry-run: each rank's command line and the environment ddprun would give it, as text or as
/// JSON lines (with --events -). Pure.

#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"
#include "launcher/env/worker_env.hpp"

namespace ddp::launcher {

/// `error_file_pattern` has "{attempt}" and "{local_rank}" placeholders-free text: the path is
/// shown as <log_dir>/.../attempt_0/<local_rank>/error.json.
std::string format_dry_run(const LaunchConfig& config, const std::vector<std::string>& argv,
                           const EnvMap& parent, int master_port, bool as_json);

/// Quotes one argument for display the way a POSIX shell would need it.
std::string shell_quote(const std::string& arg);

}  // namespace ddp::launcher
