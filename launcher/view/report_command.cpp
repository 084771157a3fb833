// SPDX-License-Identifier: MIT
// `ddprun report`: arguments and files only; the report itself is event_report.cpp's.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "launcher/common/exit_codes.hpp"
#include "launcher/output/output_sink.hpp"
#include "launcher/view/commands.hpp"
#include "launcher/view/event_report.hpp"
#include "launcher/view/subcommand.hpp"

namespace ddp::launcher::view {

namespace {

int report_fail(int code, const std::string& line) { return subcommand_fail("report", code, line); }

}  // namespace

int run_report(const std::vector<std::string>& args) {
  CLI::App app{"ddprun report: what an --events file says happened, as HTML or Markdown",
               "ddprun report"};
  std::string input, output, format = "html";
  app.add_option("events", input, "the --events file (JSON lines)")->required();
  app.add_option("-o,--output", output, "write here (default: stdout)");
  app.add_option("--format", format, "html or md")->check(CLI::IsMember({"html", "md"}));
  if (auto done = parse_subcommand(app, "report", args)) return *done;
  std::ifstream in(input, std::ios::binary);
  if (!in)
    return report_fail(kReportNoInput,
                       fmt::format("cannot read {}: {}", input, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = parse_events_text(text.str());
  if (!parsed)
    return report_fail(parsed.error().exit_code,
                       fmt::format("{}: {}", input, parsed.error().message));
  const JobReport report = digest_events(*parsed);
  const std::string body =
      format == "md" ? report_markdown(report, input) : report_html(report, input);
  if (output.empty() || output == "-") {
    return write_fully(STDOUT_FILENO, body)
               ? exit_codes::kSuccess
               : report_fail(kReportCantCreate, "cannot write to stdout");
  }
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  if (!out || !(out << body) || !out.flush()) {
    return report_fail(kReportCantCreate,
                       fmt::format("cannot write {}: {}", output, std::strerror(errno)));
  }
  return exit_codes::kSuccess;
}

}  // namespace ddp::launcher::view
