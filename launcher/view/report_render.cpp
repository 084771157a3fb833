// SPDX-License-Identifier: MIT
// The report's two renderings: one self-contained HTML file (inline style, an SVG timeline, no
// script) and Markdown. Both from a JobReport (event_report.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "launcher/common/terminal_text.hpp"
#include "launcher/view/event_report.hpp"
#include "launcher/view/status_model.hpp"

namespace ddp::launcher::view {

namespace {

using nlohmann::json;

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// Job text as inert Markdown: no raw HTML, entity, link, image, code span or * emphasis can come
/// out of it (a CommonMark viewer renders raw HTML by default), and it stays in its table cell.
/// `_` stays: a path's attempt_1 is no emphasis.
std::string md_cell(const std::string& raw) {
  // Controls made visible first: ESC and GS become `^[` and `^]`, brackets this escapes too (made
  // visible afterwards, they formed a link around the text between them).
  const std::string s = visible_line(raw);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '|':
        out += '/';
        break;
      case '\n':
      case '\r':
        out += ' ';
        break;
      case '\\':
      case '`':
      case '*':
      case '[':
      case ']':
      case '!':
      case '#':
        out += '\\';
        out += c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// Lines after the first indented for a Markdown list item's code block; no fence can close.
std::string indented(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  size_t at = 0;
  while ((at = out.find("```", at)) != std::string::npos) out.replace(at, 3, "'''");
  return out;
}

std::string utc(double t) {
  if (t <= 0) return "-";
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  ::gmtime_r(&s, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string offset(const JobReport& r, double t) {
  return t > 0 ? fmt::format("+{:.2f} s", t - r.first_time) : "-";
}

std::string run_time(const RankRun& run) {
  return run.end ? fmt::format("{:.2f} s", *run.end - run.start) : "-";
}

std::string exit_label(const RankRun& run) {
  if (run.exit.empty()) return "(no exit written)";
  std::string s = run.exit;
  if (rank_end(run.exit, run.stopped_by_ddprun) == RankEndKind::Stopped)
    s += " (stopped by ddprun)";
  if (run.oom_killed) s += " (out of memory)";
  return s;
}

/// "rank 0 (local rank 0) was killed by SIGTERM (stopped by ddprun)": a rank's end, one line.
std::string end_line(const RankEnd& e) {
  return fmt::format(
      "rank {} (local rank {}) {}{}{}", e.rank, e.local_rank.empty() ? "?" : e.local_rank, e.how(),
      e.stopped_by_ddprun ? " (stopped by ddprun)" : "", e.oom_killed ? " (out of memory)" : "");
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

struct Lane {
  const char* name;
  const char* color;
  std::vector<std::string> kinds;
};
const std::vector<Lane>& lanes() {
  static const std::vector<Lane> kLanes = {
      {"attempts", "#2e7d32", {"launch", "rendezvous", "worker_start", "restart", "summary"}},
      {"failures",
       "#b3261e",
       {"worker_exit", "job_stop", "signal", "leftovers_killed", "rendezvous_failed"}},
      {"membership",
       "#7b3fd0",
       {"node_lost", "rescale", "spare", "pending", "excluded", "pending_refused", "store_lost",
        "store_failover"}},
      {"health",
       "#d97800",
       {"hang", "stacks_saved", "straggler", "timer_expired", "no_progress_restarts"}},
  };
  return kLanes;
}

std::string timeline_svg(const JobReport& r) {
  const double width = 1000, left = 90, lane_h = 26;
  const double height = static_cast<double>(lanes().size()) * lane_h + 22;
  const double span = std::max(r.last_time - r.first_time, 1e-3);
  auto x = [&](double t) { return left + (t - r.first_time) / span * (width - left - 12); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"100%\" "
      "role=\"img\" id=\"timeline\">",
      width, height);
  for (size_t i = 0; i < lanes().size(); ++i) {
    const double y = static_cast<double>(i) * lane_h + 4;
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f3f5f8\"/><text x=\"4\" "
        "y=\"{}\">{}</text>",
        left, y, width - left - 12, lane_h - 6, y + 14, lanes()[i].name);
  }
  // Attempts as bars from their first start to their last exit.
  std::map<int, std::pair<double, double>> spans = r.attempt_spans;
  for (auto& [attempt, span] : spans) {
    // An attempt whose ranks never exited (killed ddprun) runs to the last event.
    if (span.second <= span.first) span.second = r.last_time;
  }
  for (const auto& [attempt, s] : spans) {
    svg += fmt::format(
        "<rect class=\"attempt\" x=\"{:.1f}\" y=\"8\" width=\"{:.1f}\" height=\"12\" "
        "fill=\"#a5d6a7\"><title>attempt {}: {:.2f} s</title></rect>",
        x(s.first), std::max(1.0, x(s.second) - x(s.first)), attempt, s.second - s.first);
  }
  auto draw = [&](const json& e) {
    const std::string kind = field_text(e, "event");
    size_t lane = lanes().size();
    for (size_t i = 0; i < lanes().size(); ++i) {
      const auto& k = lanes()[i].kinds;
      if (std::find(k.begin(), k.end(), kind) != k.end()) lane = i;
    }
    // A rank that ended well, or that ddprun stopped, is no failure: drawn with the attempts.
    if (kind == "worker_exit" && !is_failure_event(e)) lane = 0;
    if (lane == lanes().size()) return;
    const auto it = e.find("time");
    const double t = it != e.end() && it->is_number() ? it->get<double>() : r.first_time;
    svg += fmt::format(
        "<g class=\"ev\" data-event=\"{}\"><circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" "
        "fill=\"{}\" opacity=\"0.85\"/><title>{} {}: {}</title></g>",
        escape(kind), x(t), static_cast<double>(lane) * lane_h + 4 + (lane_h - 6) / 2,
        kind == "worker_start" || kind == "worker_exit" ? 3 : 5, lanes()[lane].color, offset(r, t),
        escape(kind), escape(describe_event(e)));
  };
  r.events.each(draw, [](size_t) {});
  svg += fmt::format("<text x=\"{}\" y=\"{}\">{} → {} ({:.2f} s)</text></svg>", left, height - 4,
                     escape(utc(r.first_time)), escape(utc(r.last_time)), span);
  return svg;
}

double event_time(const json& e) {
  const auto it = e.find("time");
  return it != e.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string left_out_text(size_t n) {
  return fmt::format("... {} more left out of the report (the first and the last {} are shown)", n,
                     kReportKeep);
}

std::string event_rows_html(const JobReport& r, const Kept<json>& events) {
  std::string out = "<table><tr><th>when</th><th>event</th><th>what</th></tr>";
  events.each(
      [&](const json& e) {
        out += fmt::format(
            "<tr class=\"event\" data-event=\"{0}\"><td>{1}</td><td>{0}</td><td>{2}</td></tr>",
            escape(field_text(e, "event")), offset(r, event_time(e)), escape(describe_event(e)));
      },
      [&](size_t n) {
        out +=
            fmt::format("<tr class=\"left-out\"><td colspan=\"3\">{}</td></tr>", left_out_text(n));
      });
  return out + "</table>";
}

std::string stopped_html(const AttemptFailure& f) {
  if (f.stopped.empty() && f.stopped_left_out == 0) return {};
  std::string out = fmt::format("<div class=\"consequences\"><p>stopped because of {}:</p><ul>",
                                escape(f.because()));
  for (const auto& e : f.stopped) {
    out += fmt::format("<li class=\"consequence\" data-rank=\"{}\">{}{}</li>", e.rank,
                       escape(end_line(e)),
                       e.message.empty() ? "" : ": " + escape(first_line(e.message)));
  }
  if (f.stopped_left_out > 0)
    out += fmt::format("<li>... and {} more rank(s)</li>", f.stopped_left_out);
  return out + "</ul></div>";
}

std::string attempt_failures_html(const JobReport& r) {
  std::string out;
  for (size_t i = 0; i < r.attempt_failures.size(); ++i) {
    const AttemptFailure& f = r.attempt_failures[i];
    if (i == kReportKeep && r.attempt_failures_left_out > 0)
      out +=
          fmt::format("<p class=\"left-out\">{}</p>", left_out_text(r.attempt_failures_left_out));
    out += fmt::format("<div class=\"attempt-failure\" data-attempt=\"{}\"><p><b>attempt {}</b>: ",
                       f.attempt, f.attempt);
    if (f.root) {
      out += fmt::format("<span class=\"root\" data-rank=\"{}\">{}</span> (root cause)</p>",
                         f.root->rank, escape(end_line(*f.root)));
      if (!f.root->message.empty())
        out += fmt::format("<pre class=\"message\">{}</pre>", escape(f.root->message));
      if (!f.root->traceback.empty())
        out += fmt::format("<pre class=\"traceback\">{}</pre>", escape(f.root->traceback));
    } else {
      out += fmt::format("<span class=\"root\">{}</span> (root cause)</p>", escape(f.because()));
    }
    out += stopped_html(f) + "</div>";
  }
  return out;
}

std::string attempt_failures_md(const JobReport& r) {
  std::string m = "### Failed attempts\n\n";
  for (size_t i = 0; i < r.attempt_failures.size(); ++i) {
    const AttemptFailure& f = r.attempt_failures[i];
    if (i == kReportKeep && r.attempt_failures_left_out > 0)
      m += fmt::format("- {}\n", left_out_text(r.attempt_failures_left_out));
    if (f.root) {
      m += fmt::format("- attempt {}: {} (root cause)\n", f.attempt, md_cell(end_line(*f.root)));
      if (!f.root->message.empty()) m += "\n  ```\n  " + indented(f.root->message) + "\n  ```\n";
      if (!f.root->traceback.empty())
        m += "\n  ```\n  " + indented(f.root->traceback) + "\n  ```\n";
    } else {
      m += fmt::format("- attempt {}: {} (root cause)\n", f.attempt, md_cell(f.because()));
    }
    if (f.stopped.empty() && f.stopped_left_out == 0) continue;
    m += fmt::format("\n  stopped because of {}:\n\n", md_cell(f.because()));
    for (const auto& e : f.stopped) {
      m += fmt::format("  - {}{}\n", md_cell(end_line(e)),
                       e.message.empty() ? "" : ": " + md_cell(first_line(e.message)));
    }
    if (f.stopped_left_out > 0)
      m += fmt::format("  - ... and {} more rank(s)\n", f.stopped_left_out);
  }
  return m + "\n";
}

}  // namespace

std::string report_html(const JobReport& r, const std::string& source) {
  std::string h =
      "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'\"><title>ddprun report</title><style>"
      "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#1d2330}"
      "h1{font-size:18px}h2{font-size:14px;margin-top:20px}"
      "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #e3e6ec;"
      "text-align:left;vertical-align:top}.cause{background:#fde2e1;padding:6px 10px;"
      "border-radius:4px}.ok{background:#e3f4e6}svg text{font:10px system-ui,sans-serif;"
      "fill:#4a5468}.consequences{margin-left:16px}</style></head><body>";
  h += fmt::format("<h1>ddprun report: job {}</h1>", escape(r.run_id.empty() ? "-" : r.run_id));
  h += "<h2>Summary</h2><table>";
  auto row = [&](const std::string& k, const std::string& v) {
    h += fmt::format("<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
  };
  row("events file", source + (r.truncated ? " (last line cut short, ignored)" : ""));
  row("program", r.program);
  row("node", fmt::format("{} of {}", r.node_rank, r.nnodes));
  row("world size", std::to_string(r.world_size));
  row("attempts", std::to_string(r.attempts));
  row("started", utc(r.first_time));
  row("duration", fmt::format("{:.2f} s", r.last_time - r.first_time));
  row("exit code", r.exit_code ? std::to_string(*r.exit_code) : "(no summary)");
  h += "</table>";
  const bool ok = r.exit_code && *r.exit_code == 0;
  h += fmt::format("<p class=\"cause{}\" id=\"root-cause\"><b>Root cause:</b> {}</p>",
                   ok ? " ok" : "", escape(r.root_cause));
  h += "<h2>Timeline</h2>" + timeline_svg(r);
  if (!r.attempt_failures.empty()) {
    h += "<h2>Failed attempts</h2>" + attempt_failures_html(r);
  }
  if (!r.failures.empty()) h += "<h2>Failures</h2>" + event_rows_html(r, r.failures);
  if (!r.membership.empty()) {
    h += "<h2>Lost nodes, re-forms and spares</h2>" + event_rows_html(r, r.membership);
  }
  if (!r.hangs.empty()) {
    h += "<h2>Hangs, stacks and stragglers</h2>" + event_rows_html(r, r.hangs);
  }
  h += "<h2>Ranks</h2><table><tr><th>attempt</th><th>rank</th><th>local rank</th><th>pid</th>"
       "<th>started</th><th>run time</th><th>exit</th></tr>";
  r.runs.each(
      [&](const RankRun& run) {
        h += fmt::format(
            "<tr class=\"run\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td></tr>",
            run.attempt, run.rank, run.local_rank, run.pid, offset(r, run.start), run_time(run),
            escape(exit_label(run)));
      },
      [&](size_t n) {
        h += fmt::format("<tr class=\"left-out\"><td colspan=\"7\">{}</td></tr>", left_out_text(n));
      });
  h += "</table><h2>Every event</h2>" + event_rows_html(r, r.events);
  // Job text (a message, a host name) may hold terminal escapes: shown, whoever reads it.
  return visible_block(h + "</body></html>\n");
}

std::string report_markdown(const JobReport& r, const std::string& source) {
  std::string m =
      fmt::format("## ddprun report: job {}\n\n", r.run_id.empty() ? "-" : md_cell(r.run_id));
  m += fmt::format("**Root cause:** {}\n\n", md_cell(r.root_cause));
  m += "| | |\n|---|---|\n";
  m += fmt::format("| events file | {}{} |\n", md_cell(source),
                   r.truncated ? " (last line cut short, ignored)" : "");
  m += fmt::format("| program | {} |\n", md_cell(r.program));
  m += fmt::format("| node | {} of {} |\n| world size | {} |\n| attempts | {} |\n", r.node_rank,
                   r.nnodes, r.world_size, r.attempts);
  m += fmt::format("| started | {} |\n| duration | {:.2f} s |\n| exit code | {} |\n\n",
                   utc(r.first_time), r.last_time - r.first_time,
                   r.exit_code ? std::to_string(*r.exit_code) : "(no summary)");
  auto section = [&](const char* title, const Kept<json>& events) {
    if (events.empty()) return;
    m += fmt::format("### {}\n\n| when | event | what |\n|---|---|---|\n", title);
    events.each(
        [&](const json& e) {
          m += fmt::format("| {} | {} | {} |\n", offset(r, event_time(e)),
                           md_cell(field_text(e, "event")), md_cell(describe_event(e)));
        },
        [&](size_t n) { m += fmt::format("| | | {} |\n", left_out_text(n)); });
    m += "\n";
  };
  if (!r.attempt_failures.empty()) m += attempt_failures_md(r);
  section("Failures", r.failures);
  section("Lost nodes, re-forms and spares", r.membership);
  section("Hangs, stacks and stragglers", r.hangs);
  m += "### Ranks\n\n| attempt | rank | local rank | pid | started | run time | exit |\n"
       "|---|---|---|---|---|---|---|\n";
  r.runs.each(
      [&](const RankRun& run) {
        m += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", run.attempt, run.rank,
                         run.local_rank, run.pid, offset(r, run.start), run_time(run),
                         md_cell(exit_label(run)));
      },
      [&](size_t n) { m += fmt::format("| | | | | | | {} |\n", left_out_text(n)); });
  // Job text (a message, a host name) may hold terminal escapes: shown, whoever reads it.
  return visible_block(m);
}

}  // namespace ddp::launcher::view
