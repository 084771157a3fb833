#pragma once
/// The text of `ddprun --print-env-detect`: which scheduler was detected, every value it offered
/// with the variable it came from, and what ddprun will use after the precedence rules.

#include <optional>
#include <string>

#include "launcher/scheduler/detection.hpp"
#include "launcher/scheduler/merge.hpp"
#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

/// Renders the report (several lines, ending in '\n'). `master` is the resolution of the
/// effective master host, when ddprun did one.
std::string render_detection_report(const Detection& detection, const NodeSettings& settings,
                                    const std::optional<HostResolution>& master = std::nullopt);

/// When detection itself failed (an inconsistent environment): the scheduler variables that
/// are set, one per line, so that the error that follows can be checked against them.
std::string render_found_variables(const Env& env);

}  // namespace ddp::launcher::scheduler
