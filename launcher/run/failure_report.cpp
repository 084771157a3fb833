// SPDX-License-Identifier: MIT
#include "launcher/run/failure_report.hpp"
#include "launcher/common/terminal_text.hpp"
#include "rendezvous/json_text.hpp"

#include <fmt/format.h>

#include <charconv>
#include <ctime>
#include <nlohmann/json.hpp>

namespace ddp::launcher {
namespace {

constexpr const char* kRule = "============================================================\n";
constexpr const char* kThin = "------------------------------------------------------------\n";

std::string string_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return {};
  return it->is_string() ? it->get<std::string>() : dump_json(*it);
}

void append_indented(std::string& out, const std::string& text, const char* indent) {
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    out += indent;
    out.append(text, start, nl == std::string::npos ? std::string::npos : nl - start);
    out += '\n';
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
}

std::string outcome_text(const WorkerOutcome& w) {
  if (!w.start_error.empty()) {
    return w.status ? fmt::format("could not start ({}): {}", describe(*w.status), w.start_error)
                    : "could not start: " + w.start_error;
  }
  if (!w.status) return "not started";
  std::string text = describe(*w.status);
  if (w.oom_killed) text += " - killed by the kernel's OOM killer";
  return text;
}

}  // namespace

std::optional<ErrorFileInfo> parse_error_file(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  ErrorFileInfo info;
  auto message = j.find("message");
  if (message == j.end()) return std::nullopt;
  if (message->is_object()) {  // torch's @record: {"message": {"message", "extraInfo": {...}}}
    info.message = string_field(*message, "message");
    auto extra = message->find("extraInfo");
    if (extra != message->end() && extra->is_object()) {
      info.traceback = string_field(*extra, "py_callstack");
      info.timestamp = string_field(*extra, "timestamp");
    }
  } else {
    info.message = message->is_string() ? message->get<std::string>() : dump_json(*message);
  }
  if (info.timestamp.empty()) info.timestamp = string_field(j, "timestamp");
  return info;
}

std::string format_utc(std::chrono::system_clock::time_point t) {
  auto secs = std::chrono::system_clock::to_time_t(t);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d} UTC", buf, static_cast<int>(ms));
}

std::string format_error_time(const std::string& timestamp) {
  long long seconds = 0;
  auto [end, ec] = std::from_chars(timestamp.data(), timestamp.data() + timestamp.size(), seconds);
  if (ec != std::errc() || end != timestamp.data() + timestamp.size()) return timestamp;
  const auto secs = static_cast<std::time_t>(seconds);
  std::tm tm{};
  if (localtime_r(&secs, &tm) == nullptr) return timestamp;
  char buf[64];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", &tm) == 0) return timestamp;
  return buf;
}

std::string format_failure_summary(const RunSummaryInput& in) {
  std::string out = kRule;
  out += fmt::format("ddprun: {} FAILED (ddprun exit code {})\n", in.program, in.exit_code);
  if (in.interrupted_by_signal) {
    out += fmt::format("ddprun received {} and stopped the workers\n",
                       signal_name(in.interrupted_by_signal));
  }
  if (!in.job_root_cause.empty()) {
    out += kThin;
    out += fmt::format("Root cause (whole job): {}\n", in.job_root_cause);
  }
  if (!in.health_notes.empty()) {
    out += kThin;
    out += fmt::format("Health: {}\n", in.health_notes.front());
    for (size_t i = 1; i < in.health_notes.size(); ++i) out += "  " + in.health_notes[i] + "\n";
  }
  const AttemptOutcome* last = in.attempts.empty() ? nullptr : &in.attempts.back();
  if (last && last->root_cause) {
    const WorkerOutcome& w = last->workers[*last->root_cause];
    out += kThin;
    out += "Root cause (first observed failure):\n";
    out += fmt::format("  rank       : {} (local_rank: {})\n", w.rank, w.local_rank);
    out += fmt::format("  host       : {}\n", in.host);
    out +=
        w.pid > 0 ? fmt::format("  pid        : {}\n", w.pid) : std::string("  pid        : -\n");
    out += fmt::format("  exit       : {}\n", outcome_text(w));
    auto since = std::chrono::duration<double>(w.exit_time - in.start_time).count();
    out +=
        fmt::format("  time       : {} ({:.3f} s after launch)\n", format_utc(w.exit_time), since);
    out += fmt::format("  attempt    : {} (max_restarts: {})\n", last->attempt, in.max_restarts);
    if (w.error_info) {
      out += fmt::format("  error_file : {}\n", w.error_file);
      out += "  error      :\n";
      append_indented(out, w.error_info->message, "    ");
      if (!w.error_info->timestamp.empty()) {
        out += fmt::format("  error time : {}\n", format_error_time(w.error_info->timestamp));
      }
      if (!w.error_info->traceback.empty()) {
        out += "  traceback  :\n";
        append_indented(out, w.error_info->traceback, "    ");
      }
    } else {
      out += "  error_file : <none written>\n";
    }
    if (!w.stderr_tail.empty()) {
      out += "  last stderr lines:\n";
      for (const auto& line : w.stderr_tail) out += "    " + line + "\n";
    }
  }
  if (last) {
    std::string others;
    for (size_t i = 0; i < last->workers.size(); ++i) {
      const auto& w = last->workers[i];
      if (last->root_cause && i == *last->root_cause) continue;
      if (!w.status || w.status->success()) continue;
      others += fmt::format(
          "  rank {} (local_rank {}, pid {}): {}{}\n", w.rank, w.local_rank, w.pid, outcome_text(w),
          w.terminated_by_ddprun && w.start_error.empty() ? "  [terminated by ddprun]" : "");
    }
    if (!others.empty()) {
      out += kThin;
      out += "Other workers:\n" + others;
    }
  }
  if (!in.log_errors.empty()) {
    out += kThin;
    out += "Output that could not be written:\n";
    for (const auto& e : in.log_errors) out += "  " + e + "\n";
  }
  if (in.attempts.size() > 1) {
    out += kThin;
    out += "Attempts:\n";
    for (const auto& a : in.attempts) {
      if (a.root_cause) {
        const auto& w = a.workers[*a.root_cause];
        out += fmt::format("  attempt {}: rank {} failed with {}\n", a.attempt, w.rank,
                           outcome_text(w));
      } else {
        out += fmt::format("  attempt {}: no worker failed\n", a.attempt);
      }
    }
  }
  out += kRule;
  // The messages, tracebacks and stderr lines are the job's: on ddprun's stderr, a terminal's
  // escape (a title, the clipboard, a screen clear) is shown, not obeyed.
  return visible_block(out);
}

}  // namespace ddp::launcher
