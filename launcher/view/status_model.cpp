// SPDX-License-Identifier: MIT
#include "launcher/view/status_model.hpp"
#include "common/exit_codes.hpp"
#include "rendezvous/json_text.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ddp::launcher::view {

namespace {

using nlohmann::json;

template <typename T>
std::optional<T> num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<T>();
}

bool bool_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::string joined(const json& list) {
  std::string out;
  if (!list.is_array()) return out;
  for (const auto& x : list) {
    if (!out.empty()) out += ", ";
    out += x.is_string() ? x.get<std::string>() : dump_json(x);
  }
  return out;
}

}  // namespace

std::string field_text(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  return it->is_string() ? it->get<std::string>() : dump_json(*it);
}

RankEndKind rank_end(const std::string& exit, bool stopped_by_ddprun) {
  if (stopped_by_ddprun) return RankEndKind::Stopped;
  if (exit.empty()) return RankEndKind::None;
  return exit == "0" ? RankEndKind::Ok : RankEndKind::Failed;
}

bool is_failure_event(const json& e) {
  const std::string kind = field_text(e, "event");
  if (kind == "worker_exit") {
    // A worker_exit with neither a code nor a signal still ended: not well.
    const std::string code = e.contains("exit_code") ? field_text(e, "exit_code") : "?";
    return rank_end(code, bool_field(e, "terminated_by_ddprun")) == RankEndKind::Failed;
  }
  return kind == "hang" || kind == "node_lost" || kind == "timer_expired" || kind == "job_stop" ||
         kind == "rendezvous_failed" || kind == "store_lost" ||
         (kind == "summary" && field_text(e, "exit_code") != "0");
}

std::string describe_event(const json& e) {
  const std::string kind = field_text(e, "event");
  if (kind == "worker_exit") {
    std::string how =
        e.contains("exit_code") ? "exit " + field_text(e, "exit_code") : field_text(e, "signal");
    return fmt::format("rank {} ended: {}{}", field_text(e, "rank"), how,
                       bool_field(e, "terminated_by_ddprun") ? " (stopped by ddprun)" : "");
  }
  if (kind == "worker_start")
    return fmt::format("rank {} started (attempt {})", field_text(e, "rank"),
                       field_text(e, "attempt"));
  if (kind == "rendezvous")
    return fmt::format("round {}: {} node(s), world size {}", field_text(e, "attempt"),
                       field_text(e, "num_nodes"), field_text(e, "world_size"));
  if (kind == "rescale")
    return fmt::format("re-formed ({}): world size {} -> {}: {}", field_text(e, "change"),
                       field_text(e, "old_world_size"), field_text(e, "new_world_size"),
                       field_text(e, "reason"));
  if (kind == "node_lost") return field_text(e, "message");
  if (kind == "restart") return fmt::format("restart (attempt {})", field_text(e, "attempt"));
  if (kind == "hang") return fmt::format("hang verdict (source {})", field_text(e, "source"));
  if (kind == "stacks_saved")
    return "stacks saved: " + joined(e.contains("files") ? e["files"] : json::array());
  if (kind == "straggler")
    return fmt::format("rank {} is a straggler ({:.2f} vs median {:.2f} steps/s)",
                       field_text(e, "rank"), num<double>(e, "steps_per_s").value_or(0.0),
                       num<double>(e, "median_steps_per_s").value_or(0.0));
  if (kind == "summary") {
    std::string cause = field_text(e, "job_root_cause");
    return fmt::format("ended with exit {}{}", field_text(e, "exit_code"),
                       cause.empty() ? "" : ": " + cause);
  }
  if (kind == "spare" || kind == "pending") {
    std::string who = field_text(e, "node");
    return fmt::format("{} waits as {}", who.empty() ? field_text(e, "host") : who,
                       kind == "spare" ? "a spare" : "pending");
  }
  if (kind == "excluded")
    return fmt::format("excluded {} ({})", field_text(e, "host"), field_text(e, "reason"));
  if (kind == "job_stop") return fmt::format("job stopped: {}", field_text(e, "reason"));
  std::string out;
  if (e.is_object()) {
    for (const auto& [k, v] : e.items()) {
      if (k == "event" || k == "time" || k == "seq") continue;
      // The command line and environment may hold secrets; /status drops them too.
      if (k == "argv" || k == "env" || k.find("token") != std::string::npos ||
          k.find("secret") != std::string::npos || k.find("password") != std::string::npos)
        continue;
      if (!out.empty()) out += ' ';
      out += k + "=" + (v.is_string() ? v.get<std::string>() : dump_json(v));
      if (out.size() > 160) break;
    }
  }
  return out;
}

namespace {
Result<StatusModel> parse_status_json(const json& j);
}

Result<StatusModel> parse_status(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  try {
    return parse_status_json(j);
  } catch (const json::exception&) {  // a field of another type: not ddprun's status
    return Error{exit_codes::kUnavailable, "the endpoint's /status is not ddprun's status JSON"};
  }
}

namespace {
Result<StatusModel> parse_status_json(const json& j) {
  if (!j.is_object() || !j.contains("ranks")) {
    return Error{exit_codes::kUnavailable, "the endpoint's /status is not ddprun's status JSON"};
  }
  StatusModel m;
  m.phase = field_text(j, "phase");
  m.attempt = num<int>(j, "attempt").value_or(0);
  m.host = field_text(j, "host");
  m.hang_timeout_s = num<double>(j, "hang_timeout_s").value_or(0);
  m.num_nodes = num<int>(j, "nodes").value_or(1);
  m.state = m.phase;
  if (auto it = j.find("job"); it != j.end() && it->is_object()) {
    const json& job = *it;
    m.run_id = field_text(job, "run_id");
    m.state = field_text(job, "state");
    m.attempt = num<int>(job, "attempt").value_or(m.attempt);
    m.world_size = num<int>(job, "world_size").value_or(0);
    m.node_rank = num<int>(job, "node_rank").value_or(0);
    m.num_nodes = num<int>(job, "num_nodes").value_or(m.num_nodes);
    m.exit_code = num<int>(job, "exit_code");
    m.root_cause = field_text(job, "root_cause");
    for (const auto& n : job.value("nodes", json::array())) {
      NodeStatus node{field_text(n, "name"), num<int>(n, "node_rank"), field_text(n, "state"),
                      num<int>(n, "local_world_size").value_or(0)};
      m.nodes.push_back(std::move(node));
    }
  }
  for (const auto& r : j.at("ranks")) {
    if (!r.is_object()) continue;
    RankStatus rank;
    rank.node = num<int>(r, "node_rank").value_or(m.node_rank);
    rank.rank = num<int>(r, "rank").value_or(0);
    rank.local_rank = num<int>(r, "local_rank").value_or(0);
    rank.pid = num<long long>(r, "pid").value_or(0);
    rank.state = field_text(r, "state");
    rank.step = num<long long>(r, "last_step");
    rank.age_s = num<double>(r, "last_progress_age_s");
    rank.straggler = r.value("straggler", false);
    rank.exit = field_text(r, "exit");
    rank.stopped = bool_field(r, "stopped_by_ddprun");
    rank.cpu_percent = num<double>(r, "cpu_percent");
    if (rank.cpu_percent && !(*rank.cpu_percent >= 0 && *rank.cpu_percent <= 1e6))
      rank.cpu_percent.reset();
    // Read as a double: any number is safe to range-check (1 PiB at most, as job_view.hpp says).
    const auto rss = num<double>(r, "rss_bytes");
    if (rss && *rss >= 0 && *rss <= 1125899906842624.0)
      rank.rss_bytes = static_cast<long long>(*rss);
    m.ranks.push_back(std::move(rank));
  }
  m.job_wide = j.contains("job_nodes");
  if (m.world_size == 0) m.world_size = static_cast<int>(m.ranks.size());
  for (const auto& e : j.value("events", json::array())) {
    if (!e.is_object()) continue;
    const std::string kind = field_text(e, "event");
    // Where things are (the endpoint, the store, the log directory): not news in a terminal.
    if (kind == "status" || kind == "store" || kind == "launch" || kind == "file_timer") continue;
    EventLine line{num<double>(e, "time").value_or(0.0), field_text(e, "event"), describe_event(e),
                   num<long long>(e, "seq").value_or(0)};
    if (is_failure_event(e)) m.failures.push_back(line);
    m.events.push_back(std::move(line));
  }
  return m;
}
}  // namespace

void RateHistory::note(const StatusModel& model, double now_s) {
  for (const auto& r : model.ranks) {
    if (!r.step) continue;
    auto& s = samples_[{r.node, r.rank}];
    // A restart starts the steps again: the old samples say nothing about the new attempt.
    if (!s.empty() && *r.step < s.back().second) s.clear();
    s.emplace_back(now_s, *r.step);
    while (s.size() > keep_) s.pop_front();
  }
}

std::vector<double> RateHistory::recent(int node, int rank, size_t n) const {
  std::vector<double> out;
  auto it = samples_.find({node, rank});
  if (it == samples_.end()) return out;
  const auto& s = it->second;
  const size_t first = s.size() > n + 1 ? s.size() - n - 1 : 0;
  for (size_t i = first + 1; i < s.size(); ++i) {
    const double dt = s[i].first - s[i - 1].first;
    if (dt > 0)
      out.push_back(std::max(0.0, static_cast<double>(s[i].second - s[i - 1].second) / dt));
  }
  return out;
}

std::optional<double> RateHistory::rate(int node, int rank) const {
  auto it = samples_.find({node, rank});
  if (it == samples_.end() || it->second.size() < 2) return std::nullopt;
  const auto& s = it->second;
  const auto& from = s[s.size() > 10 ? s.size() - 11 : 0];
  const auto& to = s.back();
  if (to.first <= from.first) return std::nullopt;
  return std::max(0.0, static_cast<double>(to.second - from.second) / (to.first - from.first));
}

int severity(const RankStatus& r, double hang_timeout_s) {
  const RankEndKind end = rank_end(r.exit, r.stopped);
  if (end == RankEndKind::Stopped) return 1;  // stopped because another rank failed: not its own
  if (end == RankEndKind::Failed) return 4;
  const double stale_after = std::max(10.0, hang_timeout_s / 2);
  if (r.state == "running" && r.age_s && *r.age_s > stale_after) return 3;
  if (r.straggler) return 2;
  return 1;
}

std::vector<RankStatus> worst_first(std::vector<RankStatus> ranks, const RateHistory& rates,
                                    double hang_timeout_s) {
  std::stable_sort(ranks.begin(), ranks.end(), [&](const RankStatus& a, const RankStatus& b) {
    const int sa = severity(a, hang_timeout_s), sb = severity(b, hang_timeout_s);
    if (sa != sb) return sa > sb;
    // The slowest first where both rates are known (two polls or more), else the longest silent.
    const auto ra = rates.rate(a.node, a.rank), rb = rates.rate(b.node, b.rank);
    if (ra && rb && *ra != *rb) return *ra < *rb;
    const double aa = a.age_s.value_or(0), ab = b.age_s.value_or(0);
    if (aa != ab) return aa > ab;
    return a.node != b.node ? a.node < b.node : a.rank < b.rank;
  });
  return ranks;
}

}  // namespace ddp::launcher::view
