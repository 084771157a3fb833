// SPDX-License-Identifier: MIT
#pragma once
/// What `ddprun top` and `ddprun report` share: their argument parsing and their one-line errors.

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher::view {

/// "ddprun NAME: LINE" on stderr; returns `code`.
int subcommand_fail(std::string_view name, int code, const std::string& line);

/// Parses `args` (the words after the subcommand's name) into `app`. An exit code when the
/// command ends here: 0 after the help on stdout, 2 after one line for a bad argument.
std::optional<int> parse_subcommand(CLI::App& app, std::string_view name,
                                    const std::vector<std::string>& args);

}  // namespace ddp::launcher::view
