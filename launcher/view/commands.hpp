// SPDX-License-Identifier: MIT
#pragma once
/// The subcommands that look at a job instead of running one (docs/health.md, "Seeing a job"):
///   ddprun top [HOST:PORT] [--once] [--interval S]
///   ddprun report EVENTS.jsonl [-o FILE] [--format html|md]
/// main() hands them the words after the subcommand's name; each returns the exit code.

#include <string>
#include <vector>

namespace ddp::launcher::view {

int run_top(const std::vector<std::string>& args);
int run_report(const std::vector<std::string>& args);

}  // namespace ddp::launcher::view
