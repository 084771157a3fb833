// SPDX-License-Identifier: MIT
#pragma once
/// The CLI11 binding: registers every flag (both spellings, PET_<NAME> fallback) on a CLI::App
/// bound to a RawOptions. Nothing here validates values; config_from_options() does.

#include <string>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/config/raw_options.hpp"

namespace CLI {
class App;
}

namespace ddp::launcher {

/// Registers ddprun's options on `app`, writing into `raw`. The app is a prefix command: the
/// first positional argument and everything after it go to the program untouched.
void add_launch_options(CLI::App& app, RawOptions& raw);

/// What parse_command_line() produced: options, or "help was printed, exit with this code".
struct ParsedCommandLine {
  RawOptions raw;
  bool exit_now = false;  // --help / --version handled
  int exit_code = 0;
};

/// Parses argv (argv[0] excluded) into RawOptions. PET_* variables are read from the process
/// environment by CLI11. Help goes to stdout; a parse error becomes an Error (exit code 2).
Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& args);

}  // namespace ddp::launcher
