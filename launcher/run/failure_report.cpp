// SPDX-License-Identifier: MIT
#include "launcher/run/failure_report.hpp"
#include "launcher/common/terminal_text.hpp"
#include "launcher/common/utc_time.hpp"
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

std::string lenient_json_text(const std::string& json_text) {
  const auto* b = reinterpret_cast<const unsigned char*>(json_text.data());
  const size_t n = json_text.size();
  auto in = [&](size_t i, unsigned lo, unsigned hi) { return i < n && b[i] >= lo && b[i] <= hi; };
  auto hex4 = [&](size_t i) -> int {  // the value of 4 hex digits at i, or -1
    if (i + 4 > n) return -1;
    int v = 0;
    for (size_t k = i; k < i + 4; ++k) {
      const char c = static_cast<char>(b[k]);
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  };
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    const unsigned c = b[i];
    if (c == '\\' && i + 1 < n) {
      const int unit = b[i + 1] == 'u' ? hex4(i + 2) : -1;
      if (unit >= 0xD800 && unit <= 0xDBFF && i + 7 < n && b[i + 6] == '\\' && b[i + 7] == 'u') {
        const int low = hex4(i + 8);
        if (low >= 0xDC00 && low <= 0xDFFF) {  // a proper pair: one code point beyond U+FFFF
          out.append(json_text, i, 12);
          i += 12;
          continue;
        }
      }
      if (unit >= 0xD800 && unit <= 0xDFFF) {  // lone: strict parsers refuse the whole text
        out += "\\ufffd";
        i += 6;
        continue;
      }
      out.append(json_text, i, 2);  // any other escape, kept (and "\\" is not read as a start)
      i += 2;
      continue;
    }
    size_t len = 0;  // the length of the well-formed UTF-8 sequence at i, 0 if none
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = in(i + 1, 0x80, 0xBF) ? 2 : 0;
    } else if (c >= 0xE0 && c <= 0xEF) {
      const bool second = c == 0xE0   ? in(i + 1, 0xA0, 0xBF)  // not overlong
                          : c == 0xED ? in(i + 1, 0x80, 0x9F)  // not a surrogate
                                      : in(i + 1, 0x80, 0xBF);
      len = second && in(i + 2, 0x80, 0xBF) ? 3 : 0;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const bool second = c == 0xF0   ? in(i + 1, 0x90, 0xBF)  // not overlong
                          : c == 0xF4 ? in(i + 1, 0x80, 0x8F)  // not beyond U+10FFFF
                                      : in(i + 1, 0x80, 0xBF);
      len = second && in(i + 2, 0x80, 0xBF) && in(i + 3, 0x80, 0xBF) ? 4 : 0;
    }
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for this byte; the next one is looked at afresh
      i += 1;
    } else {
      out.append(json_text, i, len);
      i += len;
    }
  }
  return out;
}

std::optional<ErrorFileInfo> parse_error_file(const std::string& json_text, std::string* why) {
  auto skip = [&](const char* reason) -> std::optional<ErrorFileInfo> {
    if (why) *why = reason;
    return std::nullopt;
  };
  auto j = nlohmann::json::parse(lenient_json_text(json_text), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return skip("not JSON");
  if (!j.is_object()) return skip("not a JSON object");
  ErrorFileInfo info;
  auto message = j.find("message");
  if (message == j.end()) return skip("no \"message\" in it");
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

namespace {

/// The root cause's block: where, when and how the first failing worker ended, and its error.
void append_root_cause(std::string& out, const RunSummaryInput& in, const AttemptOutcome& last) {
  const WorkerOutcome& w = last.workers[*last.root_cause];
  out += kThin;
  out += "Root cause (first observed failure):\n";
  out += fmt::format("  rank       : {} (local_rank: {})\n", w.rank, w.local_rank);
  out += fmt::format("  host       : {}\n", in.host);
  out += w.pid > 0 ? fmt::format("  pid        : {}\n", w.pid) : std::string("  pid        : -\n");
  out += fmt::format("  exit       : {}\n", outcome_text(w));
  auto since = std::chrono::duration<double>(w.exit_time - in.start_time).count();
  out += fmt::format("  time       : {} ({:.3f} s after launch)\n", format_utc(w.exit_time), since);
  out += fmt::format("  attempt    : {} (max_restarts: {})\n", last.attempt, in.max_restarts);
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
  } else if (!w.error_file_unread.empty()) {
    out += fmt::format("  error_file : {} (not read: {})\n", w.error_file, w.error_file_unread);
  } else {
    out += "  error_file : <none written>\n";
  }
  if (!w.stderr_tail.empty()) {
    out += "  last stderr lines:\n";
    for (const auto& line : w.stderr_tail) out += "    " + line + "\n";
  }
}

/// The other workers of the last attempt that did not succeed.
void append_other_workers(std::string& out, const AttemptOutcome& last) {
  std::string others;
  for (size_t i = 0; i < last.workers.size(); ++i) {
    const auto& w = last.workers[i];
    if (last.root_cause && i == *last.root_cause) continue;
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

/// One line per attempt, when there was more than one.
void append_attempts(std::string& out, const RunSummaryInput& in) {
  out += kThin;
  out += "Attempts:\n";
  for (const auto& a : in.attempts) {
    if (a.root_cause) {
      const auto& w = a.workers[*a.root_cause];
      out +=
          fmt::format("  attempt {}: rank {} failed with {}\n", a.attempt, w.rank, outcome_text(w));
    } else {
      out += fmt::format("  attempt {}: no worker failed\n", a.attempt);
    }
  }
}

}  // namespace

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
  if (last && last->root_cause) append_root_cause(out, in, *last);
  if (last) append_other_workers(out, *last);
  if (!in.log_errors.empty()) {
    out += kThin;
    out += "Output that could not be written:\n";
    for (const auto& e : in.log_errors) out += "  " + e + "\n";
  }
  if (in.attempts.size() > 1) append_attempts(out, in);
  out += kRule;
  // The messages, tracebacks and stderr lines are the job's: on ddprun's stderr, a terminal's
  // escape (a title, the clipboard, a screen clear) is shown, not obeyed.
  return visible_block(out);
}

}  // namespace ddp::launcher
