// SPDX-License-Identifier: MIT
#include "launcher/run/agent_events.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ddp::launcher {

namespace {
constexpr size_t kSummaryTraceback = 16384;  // the last bytes of a worker's traceback
constexpr size_t kSummaryMessage = 16384;    // the first bytes of a worker's error message
// The room of the attempts' root causes' messages and tracebacks (a failure repeated every
// attempt), and that of all the other workers' (a collective error raised on every rank); the
// job's root cause (the last attempt's) is kept whatever is left. The summary stays one line a
// reader takes whole: `ddprun report` refuses lines over 16 MiB, and JSON may write a control
// byte as six.
constexpr size_t kSummaryCauseRoom = 1u << 20;
constexpr size_t kSummaryOtherRoom = 1u << 20;

/// A worker's error message and traceback, cut to their bounds, while `room` lasts (always for
/// `keep_whole`, the job's root cause).
void add_error_fields(nlohmann::json& jw, const ErrorFileInfo& error, bool keep_whole,
                      size_t& room) {
  auto fits = [&](size_t bytes) {
    if (keep_whole) return true;
    if (bytes > room) return false;
    room -= bytes;
    return true;
  };
  const std::string& message = error.message;
  const size_t message_bytes = std::min(message.size(), kSummaryMessage);
  if (fits(message_bytes)) {
    jw["error_message"] =
        message.size() > kSummaryMessage ? message.substr(0, kSummaryMessage) + " [cut]" : message;
  }
  // The raising frame is at the end; the error file's size is bounded by the reader.
  const std::string& tb = error.traceback;
  const size_t keep = std::min(tb.size(), kSummaryTraceback);
  if (keep > 0 && fits(keep)) jw["error_traceback"] = tb.substr(tb.size() - keep);
}
}  // namespace

nlohmann::json exit_status_fields(const ExitStatus& s) {
  nlohmann::json j;
  if (s.kind == ExitStatus::Kind::Exited) {
    j["exit_code"] = s.code;
  } else {
    j["signal"] = signal_name(s.signal);
    j["signal_number"] = s.signal;
  }
  return j;
}

nlohmann::json worker_exit_fields(const WorkerOutcome& w, int attempt) {
  nlohmann::json fields = w.status ? exit_status_fields(*w.status) : nlohmann::json::object();
  fields.update({{"rank", w.rank},
                 {"local_rank", w.local_rank},
                 {"attempt", attempt},
                 {"pid", w.pid},
                 {"terminated_by_ddprun", w.terminated_by_ddprun},
                 {"oom_killed", w.oom_killed}});
  return fields;
}

nlohmann::json start_failure_fields(const WorkerOutcome& w, int attempt, int exit_code,
                                    const std::string& error) {
  return {{"rank", w.rank},
          {"local_rank", w.local_rank},
          {"attempt", attempt},
          {"exit_code", exit_code},
          {"error", error}};
}

nlohmann::json rendezvous_fields(int attempt, const rdzv::RendezvousResult& joined) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : joined.assignment.nodes) {
    nodes.push_back({{"node_rank", n.node_rank},
                     {"name", n.name},
                     {"local_world_size", n.local_world_size},
                     {"base_rank", n.base_rank}});
  }
  return {{"attempt", attempt},
          {"node_rank", joined.node_rank},
          {"num_nodes", joined.num_nodes},
          {"world_size", joined.world_size},
          {"base_rank", joined.base_rank},
          {"nodes", nodes}};
}

nlohmann::json rescale_fields(const RescaleRecord& c) {
  auto names = [](const std::vector<rdzv::NodeAssignment>& nodes) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& n : nodes) j.push_back(n.name);
    return j;
  };
  return {{"attempt", c.attempt},
          {"reason", c.reason},
          {"change", c.change},
          {"old_nodes", names(c.old_nodes)},
          {"new_nodes", names(c.new_nodes)},
          {"old_num_nodes", c.old_nodes.size()},
          {"new_num_nodes", c.new_nodes.size()},
          {"old_world_size", c.old_world_size},
          {"new_world_size", c.new_world_size},
          {"seconds", c.seconds}};
}

std::string rescale_text(const RescaleRecord& c) {
  return fmt::format("{} -> {} node(s), world size {} -> {} ({}; re-formed in {:.2f} s)",
                     c.old_nodes.size(), c.new_nodes.size(), c.old_world_size, c.new_world_size,
                     c.reason, c.seconds);
}

nlohmann::json summary_fields(int exit_code, const std::vector<AttemptOutcome>& attempts,
                              const std::optional<RunEnd>& end, const std::string& job_root_cause) {
  nlohmann::json all = nlohmann::json::array();
  size_t cause_room = kSummaryCauseRoom;
  size_t other_room = kSummaryOtherRoom;
  for (const auto& a : attempts) {
    nlohmann::json workers = nlohmann::json::array();
    const bool last = &a == &attempts.back();
    for (const auto& w : a.workers) {
      const bool is_cause = a.root_cause && &w == &a.workers[*a.root_cause];
      nlohmann::json jw = w.status ? exit_status_fields(*w.status) : nlohmann::json::object();
      jw.update({{"rank", w.rank},
                 {"local_rank", w.local_rank},
                 {"pid", w.pid},
                 {"terminated_by_ddprun", w.terminated_by_ddprun},
                 {"oom_killed", w.oom_killed}});
      if (w.error_info)
        add_error_fields(jw, *w.error_info, last && is_cause, is_cause ? cause_room : other_room);
      workers.push_back(jw);
    }
    nlohmann::json ja{{"attempt", a.attempt}, {"workers", workers}};
    if (a.root_cause) ja["root_cause_rank"] = a.workers[*a.root_cause].rank;
    if (!a.cause.empty()) ja["cause"] = a.cause;
    all.push_back(ja);
  }
  nlohmann::json fields{{"exit_code", exit_code}, {"attempts", all}};
  if (end) {
    fields["end"] = kind_name(end->kind);
    if (end->kind == RunEndKind::Interrupted) fields["signal"] = signal_name(end->signal);
  }
  if (!job_root_cause.empty()) fields["job_root_cause"] = job_root_cause;
  return fields;
}

}  // namespace ddp::launcher
