// SPDX-License-Identifier: MIT
// `ddprun report`: arguments and files only; the report itself is event_report.cpp's.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "common/exit_codes.hpp"
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
  // -o naming the events file (or a link to it) would replace the events with their report.
  struct stat in_st {
  }, out_st{};
  if (!output.empty() && output != "-" && ::stat(input.c_str(), &in_st) == 0 &&
      ::stat(output.c_str(), &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
      in_st.st_ino == out_st.st_ino)
    return report_fail(exit_codes::kUsage,
                       fmt::format("-o {} is the events file {}: not overwritten", output, input));
  std::ifstream in(input, std::ios::binary);
  if (!in)
    return report_fail(kReportNoInput,
                       fmt::format("cannot read {}: {}", input, std::strerror(errno)));
  // A line at a time through a fixed buffer: memory does not grow with the file, and a line
  // longer than kReportMaxLine is refused as soon as that much is read (/dev/zero has no end).
  ReportBuilder builder;
  std::string line;
  std::vector<char> chunk(1 << 16);
  auto fail = [&](const Error& e) {
    return report_fail(e.exit_code, fmt::format("{}: {}", input, e.message));
  };
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    size_t start = 0;
    while (start < got) {
      const char* nl =
          static_cast<const char*>(std::memchr(chunk.data() + start, '\n', got - start));
      const size_t end = nl ? static_cast<size_t>(nl - chunk.data()) : got;
      line.append(chunk.data() + start, end - start);
      if (line.size() > kReportMaxLine) return fail(builder.too_long());
      if (!nl) break;
      if (auto added = builder.add_line(line); !added) return fail(added.error());
      line.clear();
      start = end + 1;
    }
  }
  if (in.bad())
    return report_fail(kReportNoInput,
                       fmt::format("cannot read {}: {}", input, std::strerror(errno)));
  if (!line.empty()) {
    if (auto added = builder.add_line(line, true); !added) return fail(added.error());
  }
  auto built = builder.finish();
  if (!built) return fail(built.error());
  const JobReport& report = *built;
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
