// SPDX-License-Identifier: MIT
#include "launcher/view/event_report.hpp"
#include "launcher/view/status_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <type_traits>

namespace ddp::launcher::view {

namespace {

using nlohmann::json;

constexpr size_t kMaxOpenRuns = 100'000;  // runs started and not yet exited (a hostile file)
constexpr size_t kMaxAttemptSpans = 10'000;
constexpr size_t kMaxEndsPerAttempt = 64;    // ranks grouped per attempt; the rest counted
constexpr size_t kMaxStoredEnds = 20'000;    // of all attempts
constexpr size_t kMaxMessage = 2048;         // bytes of a message kept (as /status keeps them)
constexpr size_t kMaxTraceback = 16384;      // the end of a traceback kept
constexpr size_t kMaxStoredText = 4u << 20;  // messages and tracebacks of all attempts

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
                                      "failed_rank",
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

std::string RankEnd::how() const {
  if (exit.empty()) return "has no exit in the events";
  const bool code = exit.find_first_not_of("-0123456789") == std::string::npos;
  return code ? "exited with code " + exit : "was killed by " + exit;
}

std::string AttemptFailure::text() const {
  if (!root) return fmt::format("attempt {}: {}", attempt, cause.empty() ? "stopped" : cause);
  std::string out = fmt::format("rank {} (local rank {}, attempt {}) {}{}", root->rank,
                                root->local_rank.empty() ? "?" : root->local_rank, attempt,
                                root->how(), root->oom_killed ? " (out of memory)" : "");
  if (!root->message.empty()) out += ": " + root->message.substr(0, root->message.find('\n'));
  return out;
}

std::string AttemptFailure::because() const {
  if (root) return fmt::format("rank {}", root->rank);
  return cause.empty() ? std::string("ddprun's stop (no cause in the events)") : cause;
}

std::vector<AttemptFailure> group_attempts(const std::map<int, AttemptRecord>& attempts) {
  std::vector<AttemptFailure> out;
  for (const auto& [number, rec] : attempts) {  // a map: oldest first, whatever the file's order
    auto ended_badly = [](const RankEnd& e) {
      const auto kind = rank_end(e.exit, e.stopped_by_ddprun);
      return kind == RankEndKind::Stopped || kind == RankEndKind::Failed;
    };
    AttemptFailure f;
    f.attempt = number;
    f.cause = rec.cause;
    std::optional<int> root_rank = rec.cause_rank;
    if (!root_rank && rec.cause.empty()) {  // no decision in the events: the first own failure
      const RankEnd* first = nullptr;
      for (const auto& e : rec.ends) {
        if (rank_end(e.exit, e.stopped_by_ddprun) != RankEndKind::Failed) continue;
        if (!first || std::tie(e.time, e.rank) < std::tie(first->time, first->rank)) first = &e;
      }
      if (first) root_rank = first->rank;
    }
    if (root_rank) {
      auto it = std::find_if(rec.ends.begin(), rec.ends.end(),
                             [&](const RankEnd& e) { return e.rank == *root_rank; });
      if (it != rec.ends.end()) {
        f.root = *it;
      } else {  // the decision names a rank with no exit in the events
        f.root.emplace();
        f.root->rank = *root_rank;
      }
    }
    for (const auto& e : rec.ends) {
      if ((root_rank && e.rank == *root_rank) || !ended_badly(e)) continue;
      f.stopped.push_back(e);
    }
    std::sort(f.stopped.begin(), f.stopped.end(),
              [](const RankEnd& a, const RankEnd& b) { return a.rank < b.rank; });
    f.stopped_left_out = rec.ends_left_out;
    if (!f.root && f.cause.empty() && f.stopped.empty()) continue;  // no failure in it
    out.push_back(std::move(f));
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
    note_exit(e, t);
  } else if (kind == "restart") {
    note_restart(e);
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

void ReportBuilder::note_exit(const json& e, double t) {
  const bool by_ddprun = flag(e, "terminated_by_ddprun");
  const int attempt = number(e, "attempt", 0);
  const int rank = number(e, "rank", 0);
  auto it = open_.find({attempt, rank});
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
  if (is_failure_event(e)) r_.failures.add(e);
  const auto end = rank_end(exit_text(e), by_ddprun);
  if (end != RankEndKind::Stopped && end != RankEndKind::Failed) return;
  if (AttemptRecord* rec = record(attempt)) {
    merge_end(*rec,
              RankEnd{rank,
                      field_text(e, "local_rank"),
                      exit_text(e),
                      by_ddprun,
                      flag(e, "oom_killed"),
                      t,
                      {},
                      {}},
              false);
  }
}

void ReportBuilder::note_restart(const json& e) {
  // "attempt" is the new one: the failed_rank and the cause are the previous attempt's.
  const int attempt = number(e, "attempt", 0) - 1;
  if (attempt < 0) return;
  AttemptRecord* rec = record(attempt);
  if (!rec) return;
  if (!rec->cause_rank && e.contains("failed_rank")) rec->cause_rank = number(e, "failed_rank", 0);
  if (rec->cause.empty()) rec->cause = field_text(e, "job_root_cause");
}

AttemptRecord* ReportBuilder::record(int attempt) {
  auto it = attempts_.find(attempt);
  if (it != attempts_.end()) return &it->second;
  if (attempts_.size() >= kMaxAttemptSpans) return nullptr;
  AttemptRecord rec;
  rec.attempt = attempt;
  return &attempts_.emplace(attempt, std::move(rec)).first->second;
}

void ReportBuilder::merge_end(AttemptRecord& rec, RankEnd end, bool from_summary) {
  auto keep_text = [&](std::string& into, const std::string& text, size_t max, bool tail) {
    if (!into.empty() || text.empty() || stored_text_ >= kMaxStoredText) return;
    into = text.size() <= max ? text : tail ? text.substr(text.size() - max) : text.substr(0, max);
    stored_text_ += into.size();
  };
  auto it = std::find_if(rec.ends.begin(), rec.ends.end(),
                         [&](const RankEnd& e) { return e.rank == end.rank; });
  if (it == rec.ends.end()) {
    const bool is_cause = rec.cause_rank && *rec.cause_rank == end.rank;
    if (!is_cause && (rec.ends.size() >= kMaxEndsPerAttempt || stored_ends_ >= kMaxStoredEnds)) {
      ++(from_summary ? rec.left_out_summary : rec.left_out_exits);
      rec.ends_left_out = std::max(rec.left_out_summary, rec.left_out_exits);
      return;
    }
    ++stored_ends_;
    RankEnd fresh{end.rank,       end.local_rank, end.exit, end.stopped_by_ddprun,
                  end.oom_killed, end.time,       {},       {}};
    rec.ends.push_back(std::move(fresh));
    it = rec.ends.end() - 1;
  } else {  // worker_exit first, the summary's worker after it (or the other way round)
    if (it->local_rank.empty()) it->local_rank = end.local_rank;
    if (it->exit.empty()) it->exit = end.exit;
    it->stopped_by_ddprun = it->stopped_by_ddprun || end.stopped_by_ddprun;
    it->oom_killed = it->oom_killed || end.oom_killed;
    if (it->time == 0) it->time = end.time;
  }
  keep_text(it->message, end.message, kMaxMessage, false);
  keep_text(it->traceback, end.traceback, kMaxTraceback, true);
}

void ReportBuilder::note_summary(const json& e) {
  summary_seen_ = true;
  r_.exit_code = number(e, "exit_code", -1);
  r_.end_kind = field_text(e, "end");
  summary_cause_ = field_text(e, "job_root_cause");
  auto attempts = e.find("attempts");
  if (attempts == e.end() || !attempts->is_array()) return;
  for (const auto& a : *attempts) {
    if (!a.is_object()) continue;
    if (auto why = wrong_type(a); !why.empty()) throw std::invalid_argument(why);
    AttemptRecord* rec = record(number(a, "attempt", 0));
    if (!rec) continue;
    if (a.contains("root_cause_rank")) rec->cause_rank = number(a, "root_cause_rank", -1);
    if (auto cause = field_text(a, "cause"); !cause.empty()) rec->cause = cause;
    auto workers = a.find("workers");
    if (workers == a.end() || !workers->is_array()) continue;
    for (const auto& w : *workers) {
      if (!w.is_object()) continue;
      if (auto why = wrong_type(w); !why.empty()) throw std::invalid_argument(why);
      RankEnd end{number(w, "rank", -1),           field_text(w, "local_rank"),     exit_text(w),
                  flag(w, "terminated_by_ddprun"), flag(w, "oom_killed"),           0,
                  field_text(w, "error_message"),  field_text(w, "error_traceback")};
      const auto kind = rank_end(end.exit, end.stopped_by_ddprun);
      const bool is_cause = rec->cause_rank && *rec->cause_rank == end.rank;
      if (is_cause || kind == RankEndKind::Stopped || kind == RankEndKind::Failed ||
          !end.message.empty())
        merge_end(*rec, std::move(end), true);
    }
  }
}

Result<JobReport> ReportBuilder::finish() {
  if (r_.event_count == 0) return Error{kReportDataError, "no events in it"};
  JobReport& r = r_;
  r.attempt_failures = group_attempts(attempts_);
  const size_t failed_attempts = r.attempt_failures.size();
  if (r.attempt_failures.size() > 2 * kReportKeep) {  // the first and the last are shown
    r.attempt_failures_left_out = r.attempt_failures.size() - 2 * kReportKeep;
    r.attempt_failures.erase(r.attempt_failures.begin() + static_cast<long>(kReportKeep),
                             r.attempt_failures.end() - static_cast<long>(kReportKeep));
  }
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
                             failed_attempts, r.attempt_failures.back().text());
  } else if (!r.attempt_failures.empty() && r.attempt_failures.back().root) {
    r.root_cause = r.attempt_failures.back().text();
  } else {
    const json* hang = nullptr;
    for (const auto& h : r.hangs.head()) {
      if (field_text(h, "event") == "hang") {
        hang = &h;
        break;
      }
    }
    const std::string cause =
        r.attempt_failures.empty() ? std::string() : r.attempt_failures.back().cause;
    if (hang) {
      r.root_cause = fmt::format("hang verdict (source {}){}", field_text(*hang, "source"),
                                 cause.empty() ? "" : ": " + cause);
    } else if (!r.attempt_failures.empty()) {
      r.root_cause = r.attempt_failures.back().text();
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
