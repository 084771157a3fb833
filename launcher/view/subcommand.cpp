// SPDX-License-Identifier: MIT
#include "launcher/view/subcommand.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "common/exit_codes.hpp"
#include "launcher/common/terminal_text.hpp"
#include "launcher/output/output_sink.hpp"

namespace ddp::launcher::view {

int subcommand_fail(std::string_view name, int code, const std::string& line) {
  // The line may name a file or quote job text: nothing in it acts on the terminal.
  write_fully(STDERR_FILENO, fmt::format("ddprun {}: {}\n", name, visible_line(line)));
  return code;
}

std::optional<int> parse_subcommand(CLI::App& app, std::string_view name,
                                    const std::vector<std::string>& args) {
  try {
    // CLI11 takes the words last first.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    write_fully(STDOUT_FILENO, app.help());
    return exit_codes::kSuccess;
  } catch (const CLI::ParseError& e) {
    return subcommand_fail(name, exit_codes::kUsage, e.what());
  }
  return std::nullopt;
}

}  // namespace ddp::launcher::view
