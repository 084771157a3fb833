// SPDX-License-Identifier: MIT
#pragma once
/// The command-line definition: one table of every option (spellings, metavar, PET_ variable,
/// choices, help), its CLI11 binding onto a RawOptions, argparse-style abbreviations of long
/// options, and the shell completions generated from the same table. Nothing here validates
/// values; config_from_options() does.

#include <string>
#include <string_view>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/config/raw_options.hpp"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11's own namespace, declared here
class App;
}

namespace ddp::launcher {

/// One option as the user sees it (for abbreviations, completions and the torchrun parity test).
struct CliOption {
  std::vector<std::string> long_names;  // "--nproc-per-node", "--nproc_per_node"
  std::string short_name;               // "-r", or empty
  bool takes_value = false;
  std::string metavar;
  std::vector<std::string> choices;  // offered by completion; empty: free text
  std::string help;
};

/// Every option ddprun accepts, in --help order (including --help and --version).
const std::vector<CliOption>& launch_option_table();

/// Registers ddprun's options on `app`, writing into `raw`. The app is a prefix command: the
/// first positional argument and everything after it go to the program untouched.
void add_launch_options(CLI::App& app, RawOptions& raw);

/// What parse_command_line() produced: options, or "help was printed, exit with this code".
struct ParsedCommandLine {
  RawOptions raw;
  bool exit_now = false;  // --help / --version / --print-completion handled
  int exit_code = 0;
};

/// Replaces unambiguous prefixes of long options (before the program) by the full option, as
/// Python's argparse (torchrun) does: `--nproc_per 2` is `--nproc_per_node 2`. Spellings of one
/// option count as one candidate. An ambiguous prefix is an Error (exit 2) naming the candidates.
Result<std::vector<std::string>> expand_abbreviations(const std::vector<std::string>& args);

/// Parses argv (argv[0] excluded) into RawOptions. PET_* variables are read from the process
/// environment by CLI11. Help goes to stdout; a parse error becomes an Error (exit code 2).
Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& args);

/// The one-line error for an unknown option `arg` (as typed, with or without =VALUE), naming the
/// closest option (either spelling) when one is close: "did you mean --nproc_per_node?".
std::string unknown_option_message(std::string_view arg);

/// The completion script for `shell` ("bash" or "zsh"), generated from launch_option_table().
Result<std::string> completion_script(std::string_view shell);

}  // namespace ddp::launcher
