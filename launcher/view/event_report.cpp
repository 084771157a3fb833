// SPDX-License-Identifier: MIT
#include "launcher/view/event_report.hpp"
#include "launcher/view/status_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace ddp::launcher::view {

namespace {

using nlohmann::json;

constexpr size_t kMaxOpenRuns = 100'000;  // runs started and not yet exited (a hostile file)
constexpr size_t kMaxAttemptSpans = 10'000;

// The fields the report reads, and the type each must have when present.
constexpr std::array kNumberFields = {"time",
                                      "rank",
                                      "local_rank",
                                      "attempt",
                                      "pid",
                                      "exit_code",
                                      "node_rank",
                                      "nnodes",
                                      "num_nodes",
                                      "world_size",
                                      "signal_number",
                                      "seq",
                                      "old_world_size",
                                      "new_world_size",
                                      "root_cause_rank",
                                      "steps_per_s",
                                      "median_steps_per_s"};
constexpr std::array kBoolFields = {"terminated_by_ddprun", "oom_killed", "hung"};

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  return "an object";
}

/// "" when `j`'s known fields have their types, else why not.
std::string wrong_type(const json& j) {
  for (const char* key : kNumberFields) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_number())
      return fmt::format("\"{}\" is {}, not a number", key, type_name(*it));
  }
  for (const char* key : kBoolFields) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_boolean())
      return fmt::format("\"{}\" is {}, not a boolean", key, type_name(*it));
  }
  return {};
}

/// Deeper than `limit` levels of [ and { (outside strings): not parsed at all.
bool nested_deeper_than(std::string_view line, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : line) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

/// A whole number that `T` holds (nlohmann's get<int> would wrap 2^31 to a negative rank).
template <typename T>
bool fits(const json& v) {
  using limits = std::numeric_limits<T>;
  if (v.is_number_unsigned())
    return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(limits::max());
  if (v.is_number_integer()) {
    const auto x = v.get<std::int64_t>();
    return x >= static_cast<std::int64_t>(limits::min()) &&
           x <= static_cast<std::int64_t>(limits::max());
  }
  return false;  // a fraction where a count or an id belongs
}

template <typename T>
T number(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  if constexpr (std::is_integral_v<T>) {
    if (!fits<T>(*it))  // add_line names the line
      throw std::out_of_range(
          fmt::format("\"{}\" is {}, not a whole number in range", key, it->dump()));
  }
  return it->get<T>();
}

bool flag(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::string exit_text(const json& w) {
  if (w.contains("exit_code")) return field_text(w, "exit_code");
  return field_text(w, "signal");
}

}  // namespace

std::string AttemptFailure::text() const {
  std::string out = fmt::format("rank {} (local rank {}, attempt {}) {}{}", rank, local_rank,
                                attempt, how, oom_killed ? " (out of memory)" : "");
  if (!message.empty()) {
    std::string first = message.substr(0, message.find('\n'));
    out += ": " + first;
  }
  return out;
}

Error ReportBuilder::too_long() {
  ++line_;
  return Error{kReportDataError, fmt::format("line {} is longer than {} MiB: not an event", line_,
                                             kReportMaxLine >> 20)};
}

Result<Ok> ReportBuilder::add_line(std::string_view line, bool unterminated) {
  ++line_;
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return Ok{};
  auto bad = [&](const std::string& why) -> Result<Ok> {
    if (unterminated) {  // cut short by a killed writer
      r_.truncated = true;
      return Ok{};
    }
    return Error{kReportDataError, fmt::format("line {} {}", line_, why)};
  };
  if (nested_deeper_than(line, kReportMaxDepth))
    return bad(fmt::format("is nested deeper than {} levels: not an event", kReportMaxDepth));
  auto j = json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string())
    return bad("is not an event (a JSON object with \"event\")");
  if (auto why = wrong_type(j); !why.empty())
    return Error{kReportDataError, fmt::format("line {}: {}", line_, why)};
  try {
    return digest(j);
  } catch (const std::exception& e) {  // a nested field of a type no event has
    return Error{kReportDataError, fmt::format("line {}: {}", line_, e.what())};
  }
}

Result<Ok> ReportBuilder::digest(const json& e) {
  const std::string kind = field_text(e, "event");
  const double t = number(e, "time", 0.0);
  ++r_.event_count;
  if (t > 0 && (r_.first_time == 0 || t < r_.first_time)) r_.first_time = t;
  r_.last_time = std::max(r_.last_time, t);
  if (kind == "launch") {
    r_.run_id = field_text(e, "run_id");
    r_.program = field_text(e, "program");
    r_.node_rank = number(e, "node_rank", 0);
    r_.nnodes = number(e, "nnodes", 1);
    r_.world_size = number(e, "world_size", 0);
  } else if (kind == "rendezvous") {
    r_.world_size = number(e, "world_size", r_.world_size);
    r_.node_rank = number(e, "node_rank", r_.node_rank);
  } else if (kind == "worker_start") {
    RankRun run{number(e, "rank", 0),
                number(e, "local_rank", 0),
                number(e, "attempt", 0),
                number(e, "pid", 0LL),
                t,
                std::nullopt,
                "",
                false,
                false};
    r_.attempts = std::max(r_.attempts, run.attempt + 1);
    if (r_.attempt_spans.size() < kMaxAttemptSpans || r_.attempt_spans.count(run.attempt)) {
      auto [it, fresh] = r_.attempt_spans.try_emplace(run.attempt, t, t);
      if (!fresh) it->second.first = std::min(it->second.first, t);
    }
    open_[{run.attempt, run.rank}] = r_.runs.total();
    if (open_.size() > kMaxOpenRuns) open_.erase(open_.begin());
    r_.runs.add(run);
  } else if (kind == "worker_exit") {
    const bool by_ddprun = flag(e, "terminated_by_ddprun");
    const int attempt = number(e, "attempt", 0);
    auto it = open_.find({attempt, number(e, "rank", 0)});
    if (it != open_.end()) {
      if (RankRun* run = r_.runs.added(it->second)) {
        run->end = t;
        run->exit = exit_text(e);
        run->stopped_by_ddprun = by_ddprun;
        run->oom_killed = flag(e, "oom_killed");
      }
      open_.erase(it);
    }
    if (auto span = r_.attempt_spans.find(attempt); span != r_.attempt_spans.end())
      span->second.second = std::max(span->second.second, t);
    if (exit_text(e) != "0" && !by_ddprun) r_.failures.add(e);
  } else if (kind == "node_lost" || kind == "rescale" || kind == "spare" || kind == "pending" ||
             kind == "excluded" || kind == "store_lost" || kind == "store_failover" ||
             kind == "job_stop") {
    r_.membership.add(e);
  } else if (kind == "hang" || kind == "stacks_saved" || kind == "timer_expired" ||
             kind == "straggler" || kind == "no_progress_restarts") {
    r_.hangs.add(e);
  } else if (kind == "summary") {
    note_summary(e);
  }
  r_.events.add(e);
  return Ok{};
}

void ReportBuilder::note_summary(const json& e) {
  summary_seen_ = true;
  r_.exit_code = number(e, "exit_code", -1);
  r_.end_kind = field_text(e, "end");
  summary_cause_ = field_text(e, "job_root_cause");
  r_.attempt_failures.clear();
  auto attempts = e.find("attempts");
  if (attempts == e.end() || !attempts->is_array()) return;
  for (const auto& a : *attempts) {
    if (!a.is_object()) continue;
    if (auto why = wrong_type(a); !why.empty()) throw std::invalid_argument(why);
    if (!a.contains("root_cause_rank")) continue;
    const int rank = number(a, "root_cause_rank", -1);
    auto workers = a.find("workers");
    if (workers == a.end() || !workers->is_array()) continue;
    for (const auto& w : *workers) {
      if (!w.is_object() || number(w, "rank", -1) != rank) continue;
      if (auto why = wrong_type(w); !why.empty()) throw std::invalid_argument(why);
      AttemptFailure f;
      f.attempt = number(a, "attempt", 0);
      f.rank = rank;
      f.local_rank = field_text(w, "local_rank");
      f.how = w.contains("exit_code") ? "exited with code " + field_text(w, "exit_code")
                                      : "was killed by " + field_text(w, "signal");
      f.oom_killed = flag(w, "oom_killed");
      f.message = field_text(w, "error_message");
      f.traceback = field_text(w, "error_traceback");
      if (r_.attempt_failures.size() < kReportKeep) r_.attempt_failures.push_back(std::move(f));
      break;
    }
  }
}

Result<JobReport> ReportBuilder::finish() {
  if (r_.event_count == 0) return Error{kReportDataError, "no events in it"};
  JobReport& r = r_;
  if (!summary_seen_) {
    r.root_cause = "unknown: the events end before the summary (ddprun still running, or killed)";
  } else if (!summary_cause_.empty()) {
    r.root_cause = summary_cause_;
  } else if (r.exit_code && *r.exit_code == 0) {
    r.root_cause = r.attempt_failures.empty()
                       ? "none: the job succeeded"
                       : fmt::format(
                             "none: the job succeeded after {} failed attempt(s); the "
                             "last failure: {}",
                             r.attempt_failures.size(), r.attempt_failures.back().text());
  } else if (!r.attempt_failures.empty()) {
    r.root_cause = r.attempt_failures.back().text();
  } else {
    const json* hang = nullptr;
    for (const auto& h : r.hangs.head()) {
      if (field_text(h, "event") == "hang") {
        hang = &h;
        break;
      }
    }
    if (hang) {
      r.root_cause = fmt::format("hang verdict (source {})", field_text(*hang, "source"));
    } else {
      std::string end = r.end_kind.empty() ? std::string("failed") : r.end_kind;
      r.root_cause =
          fmt::format("{} (exit {})", end, r.exit_code ? std::to_string(*r.exit_code) : "?");
    }
  }
  return std::move(r_);
}

Result<JobReport> report_of_text(std::string_view text) {
  ReportBuilder builder;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const bool unterminated = end == std::string_view::npos;
    if (unterminated) end = text.size();
    auto added = builder.add_line(text.substr(start, end - start), unterminated);
    if (!added) return added.error();
    start = end + 1;
  }
  return builder.finish();
}

}  // namespace ddp::launcher::view
