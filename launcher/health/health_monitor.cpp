// SPDX-License-Identifier: MIT
#include "launcher/health/health_monitor.hpp"

#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <algorithm>
#include <boost/asio/post.hpp>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "common/exit_codes.hpp"

#include "launcher/common/proc_stat.hpp"
#include "launcher/common/utc_time.hpp"

#include "launcher/health/dashboard_page.hpp"
#include "launcher/health/prometheus_text.hpp"
#include "rendezvous/json_text.hpp"

namespace ddp::launcher::health {
namespace {

constexpr auto kStragglerTick = std::chrono::seconds(5);
constexpr auto kViewTick = std::chrono::seconds(1);
// GET /log/<rank>: the last lines of its stderr, each cut.
constexpr size_t kLogTailLines = 40;
constexpr size_t kLogTailLineBytes = 1024;
// The summary names at most this many suspects.
constexpr size_t kSuspectsNamed = 4;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

const char* HealthMonitor::phase_name(Phase phase) {
  switch (phase) {
    case Phase::Starting:
      return "starting";
    case Phase::Running:
      return "running";
    case Phase::Hung:
      return "hung";
    case Phase::Stopping:
      return "stopping";
    case Phase::Succeeded:
      return "succeeded";
    case Phase::Failed:
      return "failed";
  }
  return "?";
}

HealthMonitor::HealthMonitor(boost::asio::io_context& io, HealthSettings settings, Hooks hooks,
                             const std::string& path_variable)
    : io_(io),
      settings_(std::move(settings)),
      hooks_(std::move(hooks)),
      stacks_(io, StackTools::find(path_variable), settings_.stack_dump_limit),
      stragglers_(settings_.straggler_ratio, settings_.straggler_window),
      restarts_policy_(settings_.no_progress_restarts),
      hang_timer_(io),
      straggler_timer_(io),
      view_timer_(io),
      usage_(::sysconf(_SC_CLK_TCK), ::sysconf(_SC_PAGESIZE)) {}

HealthMonitor::~HealthMonitor() {
  finish(false);
  close_status_endpoint();
}

void HealthMonitor::close_status_endpoint() {
  if (status_server_) status_server_->close();
  beacon_.reset();
  if (!own_socket_dir_.empty()) {  // empty now: the heartbeat and status sockets are removed
    ::rmdir(own_socket_dir_.c_str());
    own_socket_dir_.clear();
  }
}

Result<Ok> HealthMonitor::open(const std::string& socket_dir, int nproc_per_node, int nnodes,
                               const std::string& host) {
  nnodes_ = nnodes;
  host_ = host;
  std::string dir = socket_dir;
  if (dir.size() + 32 > sizeof(sockaddr_un::sun_path)) {
    // A deep --log-dir: socket paths must fit in sun_path, so they go to a short directory.
    std::string tmpl = "/tmp/ddprun-hb-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return Error{exit_codes::kInternal,
                   fmt::format("cannot create a directory for the heartbeat sockets: {}",
                               std::strerror(errno))};
    }
    own_socket_dir_ = dir = tmpl;
  }
  for (int r = 0; r < nproc_per_node; ++r) {
    auto socket = std::make_unique<HeartbeatSocket>(
        io_,
        [this, r](size_t count, std::optional<long long> step) { on_heartbeat(r, count, step); });
    auto opened = socket->open(fmt::format("{}/heartbeat-{}.sock", dir, r));
    if (!opened) return opened.error();
    heartbeats_.push_back(std::move(socket));
  }
  if (settings_.file_timer) {
    FileTimerServer::Handlers handlers;
    handlers.on_request = [this](const TimerRequest& r) { on_timer_request(r); };
    handlers.on_expired = [this](const std::vector<ExpiredTimer>& e) { on_timers_expired(e); };
    handlers.on_bad_lines = [this](size_t count, const std::string& why) {
      hooks_.say(count == 1 ? fmt::format("warning: ignoring a line in the timer pipe: {}", why)
                            : fmt::format("warning: ignored {} lines in the timer pipe in the "
                                          "last 10 s (the last: {})",
                                          count, why));
    };
    timer_server_ = std::make_unique<FileTimerServer>(io_, std::move(handlers));
    std::string path =
        settings_.timer_file.empty() ? socket_dir + "/watchdog_timer" : settings_.timer_file;
    auto opened = timer_server_->open(path);
    if (!opened) return opened.error();
    hooks_.emit("file_timer", {{"path", path}});
  }
  // The status endpoint: always on a Unix socket next to the heartbeat ones (how `ddprun top`
  // finds a local job), on TCP too with --status-port.
  status_server_ = std::make_unique<StatusServer>(
      io_, [this](const std::string& target) { return answer(target); });
  if (settings_.status_port) {
    status_server_->allow_hosts(settings_.status_allow_hosts, host);
    auto port = status_server_->open(settings_.status_addr, *settings_.status_port);
    if (!port) return port.error();
    status_port_ = *port;
    hooks_.emit("status",
                {{"address", settings_.status_addr},
                 {"port", status_port_},
                 {"url", fmt::format("http://{}:{}/status", settings_.status_addr, status_port_)}});
    hooks_.say(fmt::format("status endpoint: http://{}:{}/ (healthz, status, metrics)",
                           settings_.status_addr.find(':') == std::string::npos
                               ? settings_.status_addr
                               : "[" + settings_.status_addr + "]",
                           status_port_));
  }
  // A view, never a reason to fail the job: without it `top` needs --status-port.
  if (auto local = status_server_->open_local(dir + "/status.sock"); !local) {
    hooks_.say(fmt::format("warning: {}; `ddprun top` finds this job only with --status-port",
                           local.error().message));
  }
  std::string refused;
  const std::string beacon_dir = status_beacon_dir(&refused);
  if (beacon_dir.empty()) {  // one line: otherwise `top` says only "no running ddprun found"
    hooks_.say(
        fmt::format("warning: no status beacon: {}; `ddprun top` finds this job only "
                    "with HOST:PORT of --status-port (remove that directory or set "
                    "XDG_RUNTIME_DIR to a private one)",
                    refused));
  }
  beacon_ = StatusBeacon::write(beacon_dir, settings_.status_addr, status_port_, host,
                                status_server_->local_path());
  if (status_server_ || hooks_.publish_view) schedule_view_tick();
  return Ok{};
}

std::map<std::string, std::string> HealthMonitor::worker_environment(int local_rank) const {
  std::map<std::string, std::string> env;
  if (local_rank >= 0 && static_cast<size_t>(local_rank) < heartbeats_.size()) {
    env["DDPRUN_HEARTBEAT_SOCKET"] = heartbeats_[local_rank]->path();
  }
  if (timer_server_) env["TORCHELASTIC_TIMER_FILE"] = timer_server_->path();
  return env;
}

std::function<void()> HealthMonitor::output_hook(int local_rank) {
  return [this, local_rank] {
    if (phase_ == Phase::Running) record_progress(local_rank, ProgressSource::Output, std::nullopt);
  };
}

void HealthMonitor::attempt_started(int attempt, const std::vector<MonitoredWorker>& workers,
                                    bool other_nodes) {
  attempt_ = attempt;
  workers_ = workers;
  phase_ = Phase::Running;
  stack_dump_started_ = false;
  attempt_stacks_.clear();
  progress_events_ = 0;
  std::vector<int> ranks;
  ranks.reserve(workers.size());
  for (const auto& w : workers) ranks.push_back(w.rank);
  tracker_.start_attempt(ranks, Clock::now(), other_nodes);
  exits_.assign(workers.size(), "");
  stopped_.assign(workers.size(), false);
  usage_.reset(workers.size());
  sample_usage();  // the first reading: CPU% from the next one on
  stragglers_.reset();
  if (timer_server_) timer_server_->forget_all();
  schedule_hang_check();
  schedule_straggler_tick();
}

void HealthMonitor::on_heartbeat(int local_rank, size_t count, std::optional<long long> step) {
  heartbeats_total_ += static_cast<long long>(count);
  if (phase_ != Phase::Running) return;
  record_progress(local_rank, ProgressSource::Heartbeat, step);
}

void HealthMonitor::record_progress(int local_rank, ProgressSource source,
                                    std::optional<long long> step) {
  const bool starting = !tracker_.job_started();
  const bool local_starting = !tracker_.local_ranks_started();
  tracker_.record(static_cast<size_t>(local_rank), source, Clock::now(), step);
  // Only what counts here is published: a chatty logging thread does not hide stuck heartbeats.
  // The first progress of the last local rank is published too (all_started, for the others).
  const bool local_started_now = local_starting && tracker_.local_ranks_started();
  if (hooks_.on_progress && (tracker_.active_source() == source || local_started_now)) {
    hooks_.on_progress(++progress_events_, tracker_.best_step(), tracker_.local_ranks_started());
  }
  // The whole job started: the startup timeout ends, the verdict may now come much sooner.
  if (starting && tracker_.job_started()) schedule_hang_check();
}

void HealthMonitor::progress_elsewhere(std::optional<long long> best_step, bool others_started) {
  if (phase_ != Phase::Running) return;
  const bool starting = !tracker_.job_started();
  tracker_.record_elsewhere(Clock::now(), best_step, others_started);
  if (starting && tracker_.job_started()) schedule_hang_check();
}

int HealthMonitor::local_rank_of(pid_t pid) const {
  for (const auto& w : workers_) {
    if (w.pid == pid) return w.local_rank;
  }
  // A process the worker started (a DataLoader worker, a subprocess): its process group.
  pid_t group = ::getpgid(pid);
  for (const auto& w : workers_) {
    if (group > 0 && w.pid == group) return w.local_rank;
  }
  return -1;
}

void HealthMonitor::on_timer_request(const TimerRequest& request) {
  if (phase_ != Phase::Running) return;
  int local = local_rank_of(request.pid);
  if (local >= 0) record_progress(local, ProgressSource::Timer, std::nullopt);
}

void HealthMonitor::on_timers_expired(const std::vector<ExpiredTimer>& expired) {
  for (const auto& e : expired) {
    const int local = local_rank_of(e.pid);
    const int rank = local >= 0 ? workers_[local].rank : -1;
    nlohmann::json fields{{"pid", e.pid},       {"scope", e.scope},       {"deadline", e.deadline},
                          {"signal", e.signal}, {"scopes", e.all_scopes}, {"attempt", attempt_}};
    if (local >= 0) {
      fields["rank"] = rank;
      fields["local_rank"] = local;
    }
    hooks_.emit("timer_expired", fields);
    ++timer_expirations_;
    if (e.signal <= 0) {  // as torch: nobody asked for a signal, nobody is reaped
      hooks_.say(fmt::format("watchdog timer '{}' of pid {} expired; it asked for no signal",
                             e.scope, e.pid));
      continue;
    }
    HealthStop stop;
    stop.text =
        fmt::format("timer_expired: {}pid {}, scope '{}', deadline {}",
                    rank >= 0 ? fmt::format("rank {}, ", rank) : std::string(), e.pid, e.scope,
                    format_utc(std::chrono::system_clock::time_point(
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(e.deadline)))));
    hooks_.say(fmt::format("{}; saving stacks, then {}", stop.text, signal_name(e.signal)));
    const pid_t pid = e.pid;
    const int sig = e.signal;
    dump_stacks("timer_expired", [this, pid, sig, stop](std::vector<std::string> saved) mutable {
      stop.details = std::move(saved);
      hooks_.on_timer_expired(pid, sig, stop);
    });
  }
}

void HealthMonitor::schedule_hang_check() {
  if (settings_.hang_timeout.count() <= 0 || phase_ != Phase::Running) return;
  hang_timer_.expires_at(next_hang_check(tracker_, hang_timeouts()));
  hang_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) check_hang();
  });
}

void HealthMonitor::check_hang() {
  if (phase_ != Phase::Running) return;
  const auto now = Clock::now();
  auto verdict = judge_hang(tracker_, hang_timeouts(), now);
  if (!verdict) {
    schedule_hang_check();
    return;
  }
  phase_ = Phase::Hung;
  ++hang_verdicts_;
  const auto source = tracker_.active_source();
  const bool progressed = tracker_.job_progressed();
  HealthStop stop;
  stop.text =
      fmt::format("hung: no progress ({}) from any rank{} for {:.1f} s ({} {:.3g})",
                  source       ? source_name(*source)
                  : progressed ? "none here, some on another node"
                               : "none since the start",
                  nnodes_ > 1 ? " of the job" : "", verdict->idle.count() / 1000.0,
                  progressed ? "--hang-timeout" : "--hang-startup-timeout",
                  (progressed ? settings_.hang_timeout
                              : std::max(settings_.hang_timeout, settings_.hang_startup_timeout))
                          .count() /
                      1000.0);
  if (progressed && verdict->before_all_started) {
    stop.text +=
        fmt::format("; not every rank had shown progress within --hang-startup-timeout {:.3g} s",
                    settings_.hang_startup_timeout.count() / 1000.0);
  }
  nlohmann::json suspects = nlohmann::json::array();
  for (size_t i = 0; i < verdict->oldest_first.size(); ++i) {
    const size_t local = verdict->oldest_first[i];
    const auto& r = tracker_.ranks()[local];
    const double age = seconds_between(tracker_.last_progress(local), now);
    nlohmann::json s{{"rank", r.rank}, {"local_rank", local}, {"last_progress_age_s", age}};
    if (r.step) s["last_step"] = *r.step;
    suspects.push_back(s);
    if (i < kSuspectsNamed) {
      stop.details.push_back(fmt::format("rank {} (local_rank {}): last progress {:.1f} s ago{}",
                                         r.rank, local, age,
                                         r.step ? fmt::format(", step {}", *r.step) : ""));
    }
  }
  hooks_.emit("hang", {{"attempt", attempt_},
                       {"idle_s", verdict->idle.count() / 1000.0},
                       {"source", source       ? source_name(*source)
                                  : progressed ? "elsewhere"
                                               : "start"},
                       {"suspects", suspects}});
  hooks_.say(fmt::format("{}; saving every worker's stacks before stopping the job", stop.text));
  if (hooks_.on_hang_verdict) hooks_.on_hang_verdict(stop.text);
  dump_stacks("hang", [this, stop](std::vector<std::string> saved) mutable {
    stop.details.insert(stop.details.end(), saved.begin(), saved.end());
    hooks_.on_hung(stop);
  });
}

void HealthMonitor::hung_elsewhere(const std::string& text,
                                   const std::function<void(const HealthStop&)>& then) {
  if (phase_ != Phase::Running) return;
  phase_ = Phase::Hung;
  hang_timer_.cancel();
  ++hang_verdicts_;
  hooks_.emit("hang", {{"attempt", attempt_}, {"source", "another node"}, {"reason", text}});
  dump_stacks("hang on another node", [text, then](std::vector<std::string> saved) {
    then(HealthStop{text, std::move(saved)});
  });
}

bool HealthMonitor::dumping() const { return stacks_.busy(); }

void HealthMonitor::after_dump(std::function<void()> then) {
  if (!stacks_.busy()) {
    boost::asio::post(io_, std::move(then));
    return;
  }
  dump_waiters_.push_back([then = std::move(then)](const std::vector<std::string>&) { then(); });
}

void HealthMonitor::dump_stacks(const std::string& reason,
                                const std::function<void(std::vector<std::string>)>& then) {
  std::vector<StackTarget> targets;
  for (const auto& w : workers_) {
    const auto& ranks = tracker_.ranks();
    if (static_cast<size_t>(w.local_rank) < ranks.size() && !ranks[w.local_rank].alive) continue;
    targets.push_back(StackTarget{w.rank, w.pid, w.log_dir + "/stacks.txt"});
  }
  if (stacks_.busy()) {
    // Two timers expiring together: the running dump covers every live worker; act on this one
    // once it is saved (signalling now would kill a rank under its tool).
    dump_waiters_.push_back(then);
    return;
  }
  if (stack_dump_started_ || targets.empty()) {
    // The stacks of this attempt are saved already: act now.
    boost::asio::post(io_, [then, saved = attempt_stacks_] { then(saved); });
    return;
  }
  stack_dump_started_ = true;
  dump_waiters_.push_back(then);
  const auto started = Clock::now();
  stacks_.dump(targets, reason, [this, started](const std::vector<StackResult>& results) {
    std::vector<std::string> saved;
    nlohmann::json files = nlohmann::json::array();
    for (const auto& r : results) {
      const bool complete = r.outcome == "ok";
      saved.push_back(fmt::format("rank {} stacks: {}{}{}", r.rank, r.output_path,
                                  r.tool.empty() ? " (no tool)" : " (" + r.tool + ")",
                                  r.tool.empty() || complete ? "" : " [" + r.outcome + "]"));
      files.push_back({{"rank", r.rank},
                       {"pid", r.pid},
                       {"path", r.output_path},
                       {"tool", r.tool},
                       {"outcome", r.outcome},
                       {"timed_out", r.timed_out}});
    }
    hooks_.emit("stacks_saved", {{"attempt", attempt_},
                                 {"files", files},
                                 {"seconds", seconds_between(started, Clock::now())}});
    attempt_stacks_ = saved;
    for (auto& waiter : std::exchange(dump_waiters_, {})) waiter(saved);
  });
}

std::vector<pid_t> HealthMonitor::stack_tools() const { return stacks_.tool_pids(); }

void HealthMonitor::schedule_straggler_tick() {
  if (settings_.straggler_ratio <= 0) return;
  straggler_timer_.expires_after(
      std::min<Clock::duration>(kStragglerTick, settings_.straggler_window / 4));
  straggler_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || phase_ != Phase::Running) return;
    std::vector<std::optional<long long>> steps;
    for (const auto& r : tracker_.ranks()) steps.push_back(r.alive ? r.step : std::nullopt);
    for (const auto& s : stragglers_.evaluate(steps, Clock::now())) {
      ++stragglers_found_;
      const int rank = tracker_.ranks()[s.local_rank].rank;
      hooks_.emit("straggler", {{"rank", rank},
                                {"local_rank", s.local_rank},
                                {"attempt", attempt_},
                                {"steps_per_s", s.rate},
                                {"median_steps_per_s", s.median_rate}});
      hooks_.say(
          fmt::format("rank {} is a straggler: {:.3g} steps/s against a median of {:.3g} "
                      "(--straggler-ratio {:.3g}); no action taken",
                      rank, s.rate, s.median_rate, settings_.straggler_ratio));
    }
    schedule_straggler_tick();
  });
}

void HealthMonitor::worker_exited(int local_rank, const ExitStatus& status,
                                  bool terminated_by_ddprun) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= tracker_.ranks().size()) return;
  const bool starting = !tracker_.job_started();
  const bool local_starting = !tracker_.local_ranks_started();
  tracker_.record_exit(static_cast<size_t>(local_rank), Clock::now());
  // A rank that exits before its first progress no longer holds the startup timeout.
  if (local_starting && tracker_.local_ranks_started() && hooks_.on_progress) {
    hooks_.on_progress(progress_events_, tracker_.best_step(), true);
  }
  if (starting && tracker_.job_started()) schedule_hang_check();
  std::string cause = status.success()                            ? "success"
                      : terminated_by_ddprun                      ? "stopped_by_ddprun"
                      : status.kind == ExitStatus::Kind::Signaled ? "signal"
                                                                  : "exit_code";
  ++exits_by_cause_[cause];
  if (static_cast<size_t>(local_rank) < exits_.size()) {
    exits_[local_rank] = status.kind == ExitStatus::Kind::Signaled ? signal_name(status.signal)
                                                                   : std::to_string(status.code);
  }
  if (static_cast<size_t>(local_rank) < stopped_.size()) {
    stopped_[local_rank] = terminated_by_ddprun && !status.success();
  }
  if (timer_server_ && static_cast<size_t>(local_rank) < workers_.size()) {
    timer_server_->forget(workers_[local_rank].pid);
  }
}

void HealthMonitor::node_records(const std::vector<NodeRecord>& others) {
  const auto now = Clock::now();
  std::vector<ReceivedNode> next;
  next.reserve(others.size());
  for (const auto& o : others) {
    auto before = std::find_if(remote_.begin(), remote_.end(), [&](const ReceivedNode& r) {
      return r.raw.node_rank == o.node_rank && r.raw.name == o.name;
    });
    if (before != remote_.end() && before->raw.record == o.record) {
      ReceivedNode same = *before;  // the same text: its ages go on growing from when it came
      same.raw.lost = o.lost;
      next.push_back(std::move(same));
      continue;
    }
    next.push_back(ReceivedNode{o, decode_published_node(o.record), now});
  }
  remote_ = std::move(next);
}

void HealthMonitor::rank_failed(RankFailure failure) {
  if (failure.node_rank < 0) failure.node_rank = node_rank();  // as numbered in that attempt
  if (failure.cause_node < 0 && (failure.cause_rank >= 0 || !failure.cause.empty())) {
    failure.cause_node = failure.node_rank;  // a consequence of this node's first failure
  }
  failures_.add(std::move(failure));
}

void HealthMonitor::attempt_cause(int attempt, const AttemptCause& cause) {
  failures_.settle(attempt, cause);
  causes_[attempt] = cause;
  while (causes_.size() > 16) causes_.erase(causes_.begin());
}

std::vector<RemoteNodeView> HealthMonitor::remote_views(Clock::time_point now) const {
  std::vector<RemoteNodeView> out;
  out.reserve(remote_.size());
  for (const auto& r : remote_) {
    out.push_back(RemoteNodeView{r.raw.node_rank, r.raw.name, r.raw.lost, r.published,
                                 seconds_between(r.received, now)});
  }
  return out;
}

PublishedNode HealthMonitor::local_record() const {
  const auto now = Clock::now();
  PublishedNode node;
  node.host = host_;
  node.attempt = attempt_;
  const auto& tr = tracker_.ranks();
  for (size_t i = 0; i < workers_.size() && i < tr.size(); ++i) {
    node.ranks.push_back(PublishedRank{
        tr[i].rank, static_cast<int>(i), workers_[i].pid, tr[i].alive ? "running" : "exited",
        tr[i].step, seconds_between(tracker_.last_progress(i), now),
        i < exits_.size() ? exits_[i] : std::string(), usage_.usage(i).cpu_percent,
        usage_.usage(i).rss_bytes, i < stopped_.size() && stopped_[i]});
  }
  // Why this node's ranks failed, for the other nodes' views (the last ones; job_view.hpp).
  const auto& kept = failures_.kept();
  const size_t first =
      kept.size() > kMaxPublishedFailures ? kept.size() - kMaxPublishedFailures : 0;
  node.failures.assign(kept.begin() + static_cast<long>(first), kept.end());
  node.failures_left_out = failures_.dropped() + static_cast<long long>(first);
  return node;
}

void HealthMonitor::sample_usage() {
  const double now_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const auto& tr = tracker_.ranks();
  for (size_t i = 0; i < workers_.size() && i < tr.size(); ++i) {
    ProcStat stat;
    const bool read = tr[i].alive && workers_[i].pid > 0 && read_proc_stat(workers_[i].pid, stat);
    usage_.note(i, workers_[i].pid, read ? stat.cpu_ticks : std::nullopt,
                read ? stat.rss_pages : std::nullopt, now_s);
  }
}

void HealthMonitor::schedule_view_tick() {
  view_timer_.expires_after(kViewTick);
  view_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    sample_usage();
    if (hooks_.publish_view && !workers_.empty()) {
      hooks_.publish_view(encode_published_node(local_record()));
    }
    if (status_server_) {
      const auto now = Clock::now();
      const double now_s = std::chrono::duration<double>(now.time_since_epoch()).count();
      const int here = node_rank();
      const auto& tr = tracker_.ranks();
      std::set<std::pair<int, int>> live;  // the job's ranks now: the others' series go
      for (const auto& r : tr) {
        live.emplace(here, r.rank);
        if (r.step) steps_.note(here, r.rank, *r.step, now_s);
      }
      for (const auto& n : remote_) {
        if (!n.published) continue;
        for (const auto& r : n.published->ranks) {
          live.emplace(n.raw.node_rank, r.rank);
          if (r.step && !n.raw.lost) steps_.note(n.raw.node_rank, r.rank, *r.step, now_s);
        }
      }
      steps_.keep_only(live);
    }
    schedule_view_tick();
  });
}

int HealthMonitor::node_rank() const {
  const RecentEvents* history = hooks_.history ? hooks_.history() : nullptr;
  if (!history) return 0;
  const auto job = history->job_json();
  auto it = job.find("node_rank");
  return it != job.end() && it->is_number_integer() ? it->get<int>() : 0;
}

void HealthMonitor::stopping() {
  if (phase_ == Phase::Running) phase_ = Phase::Stopping;
  hang_timer_.cancel();
  straggler_timer_.cancel();
}

std::optional<std::string> HealthMonitor::attempt_failed() {
  // Multi-node: the job's best step, as far as the other nodes had published it.
  const auto best = tracker_.job_best_step();
  if (!restarts_policy_.attempt_failed(best)) return std::nullopt;
  std::string why = fmt::format(
      "{} restart(s) in a row reached no step beyond {} (--no-progress-restarts {}); not "
      "restarting",
      restarts_policy_.in_a_row(),
      restarts_policy_.job_best() ? std::to_string(*restarts_policy_.job_best()) : "none",
      settings_.no_progress_restarts);
  hooks_.emit(
      "no_progress_restarts",
      {{"attempt", attempt_},
       {"in_a_row", restarts_policy_.in_a_row()},
       {"best_step", restarts_policy_.job_best() ? nlohmann::json(*restarts_policy_.job_best())
                                                 : nlohmann::json()}});
  return why;
}

void HealthMonitor::finish(bool succeeded) {
  if (phase_ != Phase::Succeeded && phase_ != Phase::Failed) {
    phase_ = succeeded ? Phase::Succeeded : Phase::Failed;
  }
  hang_timer_.cancel();
  straggler_timer_.cancel();
  view_timer_.cancel();
  // The other nodes see how this one's ranks ended (published on the session's next heartbeat).
  if (hooks_.publish_view && !workers_.empty()) {
    hooks_.publish_view(encode_published_node(local_record()));
  }
  stacks_.cancel();
  dump_waiters_.clear();
  for (auto& h : heartbeats_) h->close();
  if (timer_server_) timer_server_->close();
  // The final state stays served for a viewer (linger()); nobody watching: closed now.
  lingering_ = status_server_ && viewed_ && settings_.status_linger.count() > 0;
  if (!lingering_) close_status_endpoint();
}

void HealthMonitor::linger(std::function<void()> done, bool ended_by_signal) {
  if (!lingering_) return done();
  lingering_ = false;
  if (ended_by_signal) {
    close_status_endpoint();
    return done();
  }
  hooks_.say(
      fmt::format("serving the final state to the status endpoint's viewer for {:g} s "
                  "(--status-linger; Ctrl-C or SIGTERM ends it now)",
                  std::chrono::duration<double>(settings_.status_linger).count()));
  auto end = std::make_shared<std::function<void()>>([this, done = std::move(done)]() mutable {
    if (!done) return;
    linger_timer_->cancel();
    linger_signals_->cancel();
    close_status_endpoint();
    auto then = std::move(done);
    done = nullptr;
    then();
  });
  linger_timer_ = std::make_unique<boost::asio::steady_timer>(io_, settings_.status_linger);
  linger_signals_ = std::make_unique<boost::asio::signal_set>(io_, SIGINT, SIGTERM, SIGHUP);
  linger_timer_->async_wait([end](const boost::system::error_code& ec) {
    if (!ec) (*end)();
  });
  linger_signals_->async_wait([end](const boost::system::error_code& ec, int) {
    if (!ec) (*end)();
  });
}

HttpAnswer HealthMonitor::answer(const std::string& target) const {
  if (target == "/healthz") {
    if (phase_ == Phase::Running || phase_ == Phase::Starting)
      return {200, "text/plain; charset=utf-8", "ok\n"};
    return {503, "text/plain; charset=utf-8", fmt::format("{}\n", phase_name(phase_))};
  }
  if (target == "/status") {
    viewed_ = true;
    return {200, "application/json", status_json()};
  }
  if (target.starts_with("/log/")) return log_answer(target.substr(5));
  if (target == "/history") {
    const double now_s = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    return {200, "application/json", dump_json(steps_.json(now_s)) + "\n"};
  }
  if (target == "/metrics")
    return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_text()};
  if (target == "/" || target == "/index.html") {
    viewed_ = true;
    return {200, "text/html; charset=utf-8", std::string(dashboard_page())};
  }
  return {404, "text/plain; charset=utf-8", "not found\n"};
}

HttpAnswer HealthMonitor::log_answer(std::string_view rank_text) const {
  // "<rank>" (stderr, as before) or "<rank>/stdout".
  bool out = false;
  if (rank_text.ends_with("/stdout")) {
    out = true;
    rank_text.remove_suffix(7);
  }
  const auto& tail = out ? hooks_.stdout_tail : hooks_.stderr_tail;
  int rank = -1;
  auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
  const auto& tr = tracker_.ranks();
  for (size_t i = 0; ec == std::errc{} && end == rank_text.data() + rank_text.size() &&
                     i < workers_.size() && i < tr.size();
       ++i) {
    if (workers_[i].rank != rank) continue;
    nlohmann::json lines = nlohmann::json::array();
    if (tail) {
      for (auto& line : tail(static_cast<int>(i), kLogTailLines)) {
        if (line.size() > kLogTailLineBytes) line.resize(kLogTailLineBytes);
        lines.push_back(std::move(line));
      }
    }
    nlohmann::json j{{"rank", rank},
                     {"local_rank", i},
                     {"attempt", attempt_},
                     {"stream", out ? "stdout" : "stderr"},
                     {"lines", std::move(lines)}};
    return {200, "application/json", dump_json(j) + "\n"};
  }
  return {404, "text/plain; charset=utf-8", "no such rank on this node\n"};
}

std::string HealthMonitor::status_json() const {
  const auto now = Clock::now();
  nlohmann::json ranks = nlohmann::json::array();
  const auto& tr = tracker_.ranks();
  for (size_t i = 0; i < workers_.size() && i < tr.size(); ++i) {
    nlohmann::json r{{"rank", tr[i].rank},
                     {"local_rank", i},
                     {"pid", workers_[i].pid},
                     {"state", tr[i].alive ? "running" : "exited"},
                     {"last_progress_age_s", seconds_between(tracker_.last_progress(i), now)},
                     {"heartbeats", tr[i].heartbeats},
                     {"straggler", stragglers_.flagged(i)}};
    r["last_step"] = tr[i].step ? nlohmann::json(*tr[i].step) : nlohmann::json();
    r["exit"] =
        i < exits_.size() && !exits_[i].empty() ? nlohmann::json(exits_[i]) : nlohmann::json();
    r["stopped_by_ddprun"] = i < stopped_.size() && stopped_[i];
    const RankUsage used = usage_.usage(i);
    r["cpu_percent"] = used.cpu_percent ? nlohmann::json(*used.cpu_percent) : nlohmann::json();
    r["rss_bytes"] = used.rss_bytes ? nlohmann::json(*used.rss_bytes) : nlohmann::json();
    ranks.push_back(r);
  }
  // Every node's ranks (job_view.hpp): this node's, then what the others published.
  const int here = node_rank();
  const auto remote = remote_views(now);
  const size_t local_count = ranks.size();
  const JobEnd end = phase_ == Phase::Succeeded ? JobEnd::Succeeded
                     : phase_ == Phase::Failed  ? JobEnd::Failed
                                                : JobEnd::No;
  ranks = merge_job_ranks(std::move(ranks), here, host_, remote, end);
  for (auto& r : ranks) {
    const auto rate = steps_.rate(r.value("node_rank", here), r.value("rank", 0));
    r["steps_per_s"] = rate ? nlohmann::json(std::round(*rate * 100) / 100) : nlohmann::json();
  }
  const auto source = tracker_.active_source();
  nlohmann::json j{
      {"phase", phase_name(phase_)},
      {"attempt", attempt_},
      {"restarts", attempt_},
      {"nodes", nnodes_},
      {"host", host_},
      {"progress_source", source ? nlohmann::json(source_name(*source)) : nlohmann::json()},
      {"hang_timeout_s", settings_.hang_timeout.count() / 1000.0},
      {"hang_verdicts", hang_verdicts_},
      {"timer_expirations", timer_expirations_},
      {"status_port", status_port_},
      // Other nodes' pages point at node 0's only when every node was given the same port.
      {"status_port_fixed", settings_.status_port.value_or(0) != 0},
      {"ranks", ranks}};
  // Every node's failures: this node's, then what the others published (job_view.hpp).
  j["failures"] = merge_job_failures(failures_.json(), here, host_, remote, causes_);
  j["failures_dropped"] = failures_.dropped() + remote_failures_left_out(remote);
  if (nnodes_ > 1 || !remote.empty()) {
    j["job_nodes"] = job_nodes_json(here, host_, local_count, remote);
  }
  if (const RecentEvents* history = hooks_.history ? hooks_.history() : nullptr) {
    j["job"] = history->job_json();
    auto events = history->events_json();
    j["events"] = std::move(events["events"]);
    j["events_dropped"] = events["dropped"];
  }
  const auto elsewhere = tracker_.last_progress_elsewhere();
  j["last_progress_elsewhere_age_s"] =
      elsewhere ? nlohmann::json(seconds_between(*elsewhere, now)) : nlohmann::json();
  return dump_json(j) + "\n";
}

std::string HealthMonitor::metrics_text() const {
  const auto now = Clock::now();
  PrometheusText m;
  m.family("ddprun_up", "gauge", "1 while ddprun runs and its workers make progress")
      .sample({}, phase_ == Phase::Running || phase_ == Phase::Starting ? 1 : 0);
  m.family("ddprun_attempt", "gauge", "Current attempt (0: the first)").sample({}, attempt_);
  m.family("ddprun_restarts_total", "counter", "Restarts of the worker group").sample({}, attempt_);
  auto& exits = m.family("ddprun_worker_exits_total", "counter", "Worker exits by cause");
  for (const char* cause : {"success", "exit_code", "signal", "stopped_by_ddprun"}) {
    auto it = exits_by_cause_.find(cause);
    exits.sample({{"cause", cause}},
                 it == exits_by_cause_.end() ? 0 : static_cast<double>(it->second));
  }
  m.family("ddprun_hang_verdicts_total", "counter", "Hang verdicts (--hang-timeout)")
      .sample({}, hang_verdicts_);
  m.family("ddprun_timer_expirations_total", "counter", "Expired watchdog timers")
      .sample({}, timer_expirations_);
  m.family("ddprun_stragglers_total", "counter", "Straggler notices").sample({}, stragglers_found_);
  m.family("ddprun_heartbeats_total", "counter", "Heartbeat datagrams received")
      .sample({}, heartbeats_total_);
  const auto& tr = tracker_.ranks();
  auto& age = m.family("ddprun_rank_last_progress_age_seconds", "gauge",
                       "Seconds since each rank last made progress");
  for (size_t i = 0; i < tr.size(); ++i) {
    age.sample({{"rank", std::to_string(tr[i].rank)}, {"local_rank", std::to_string(i)}},
               seconds_between(tracker_.last_progress(i), now));
  }
  auto& step =
      m.family("ddprun_rank_step", "gauge", "Last step number each rank's heartbeat carried");
  for (size_t i = 0; i < tr.size(); ++i) {
    if (tr[i].step) {
      step.sample({{"rank", std::to_string(tr[i].rank)}, {"local_rank", std::to_string(i)}},
                  static_cast<double>(*tr[i].step));
    }
  }
  if (hooks_.extra_metrics) hooks_.extra_metrics(m);
  return m.str();
}

}  // namespace ddp::launcher::health
