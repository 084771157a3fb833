// SPDX-License-Identifier: MIT
#include "launcher/view/event_report.hpp"
#include "launcher/view/status_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ddp::launcher::view {

namespace {

using nlohmann::json;

std::string exit_text(const json& w) {
  if (w.contains("exit_code")) return field_text(w, "exit_code");
  return field_text(w, "signal");
}

std::string root_cause_of(const JobReport& r, const json* summary) {
  if (!summary) {
    return "unknown: the events end before the summary (ddprun still running, or killed)";
  }
  if (std::string cause = field_text(*summary, "job_root_cause"); !cause.empty()) return cause;
  if (r.exit_code && *r.exit_code == 0) return "none: the job succeeded";
  const json attempts = summary->value("attempts", json::array());
  for (auto a = attempts.rbegin(); a != attempts.rend(); ++a) {
    if (!a->contains("root_cause_rank")) continue;
    const int rank = (*a)["root_cause_rank"].get<int>();
    for (const auto& w : a->value("workers", json::array())) {
      if (w.value("rank", -1) != rank) continue;
      std::string how = w.contains("exit_code") ? "exited with code " + field_text(w, "exit_code")
                                                : "was killed by " + field_text(w, "signal");
      std::string msg = field_text(w, "error_message");
      return fmt::format("rank {} (local rank {}, attempt {}) {}{}{}", rank,
                         field_text(w, "local_rank"), field_text(*a, "attempt"), how,
                         w.value("oom_killed", false) ? " (out of memory)" : "",
                         msg.empty() ? "" : ": " + msg);
    }
  }
  for (const auto& h : r.hangs) {
    if (field_text(h, "event") == "hang")
      return fmt::format("hang verdict (source {})", field_text(h, "source"));
  }
  std::string end = r.end_kind.empty() ? std::string("failed") : r.end_kind;
  return fmt::format("{} (exit {})", end, r.exit_code ? std::to_string(*r.exit_code) : "?");
}

}  // namespace

Result<ParsedEvents> parse_events_text(const std::string& text) {
  ParsedEvents out;
  size_t start = 0;
  int line_number = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const bool last_unterminated = end == std::string::npos;
    if (last_unterminated) end = text.size();
    ++line_number;
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("event") && j["event"].is_string()) {
      out.events.push_back(std::move(j));
      continue;
    }
    if (last_unterminated) {  // cut short by a killed writer
      out.truncated = true;
      break;
    }
    return Error{
        kReportDataError,
        fmt::format("line {} is not an event (a JSON object with \"event\")", line_number)};
  }
  if (out.events.empty()) return Error{kReportDataError, "no events in it"};
  return out;
}

JobReport digest_events(const ParsedEvents& parsed) {
  JobReport r;
  r.events = parsed.events;
  r.truncated = parsed.truncated;
  std::map<std::pair<int, int>, size_t> open;  // (attempt, rank) -> runs index
  const json* summary = nullptr;
  for (const auto& e : parsed.events) {
    const std::string kind = field_text(e, "event");
    const double t = e.value("time", 0.0);
    if (t > 0 && (r.first_time == 0 || t < r.first_time)) r.first_time = t;
    r.last_time = std::max(r.last_time, t);
    if (kind == "launch") {
      r.run_id = field_text(e, "run_id");
      r.program = field_text(e, "program");
      r.node_rank = e.value("node_rank", 0);
      r.nnodes = e.value("nnodes", 1);
      r.world_size = e.value("world_size", 0);
    } else if (kind == "rendezvous") {
      r.world_size = e.value("world_size", r.world_size);
      r.node_rank = e.value("node_rank", r.node_rank);
    } else if (kind == "worker_start") {
      RankRun run{e.value("rank", 0),
                  e.value("local_rank", 0),
                  e.value("attempt", 0),
                  e.value("pid", 0LL),
                  t,
                  std::nullopt,
                  "",
                  false,
                  false};
      r.attempts = std::max(r.attempts, run.attempt + 1);
      open[{run.attempt, run.rank}] = r.runs.size();
      r.runs.push_back(run);
    } else if (kind == "worker_exit") {
      const bool by_ddprun = e.value("terminated_by_ddprun", false);
      auto it = open.find({e.value("attempt", 0), e.value("rank", 0)});
      if (it != open.end()) {
        RankRun& run = r.runs[it->second];
        run.end = t;
        run.exit = exit_text(e);
        run.stopped_by_ddprun = by_ddprun;
        run.oom_killed = e.value("oom_killed", false);
      }
      if (exit_text(e) != "0" && !by_ddprun) r.failures.push_back(e);
    } else if (kind == "node_lost" || kind == "rescale" || kind == "spare" || kind == "pending" ||
               kind == "excluded" || kind == "store_lost" || kind == "store_failover" ||
               kind == "job_stop") {
      r.membership.push_back(e);
    } else if (kind == "hang" || kind == "stacks_saved" || kind == "timer_expired" ||
               kind == "straggler" || kind == "no_progress_restarts") {
      r.hangs.push_back(e);
    } else if (kind == "summary") {
      summary = &e;
      r.exit_code = e.value("exit_code", -1);
      r.end_kind = field_text(e, "end");
    }
  }
  r.root_cause = root_cause_of(r, summary);
  return r;
}

}  // namespace ddp::launcher::view
