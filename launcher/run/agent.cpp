// SPDX-License-Identifier: MIT
#include "launcher/run/agent.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "common/exit_codes.hpp"
#include "launcher/common/terminal_text.hpp"
#include "launcher/run/agent_events.hpp"
#include "launcher/run/error_file.hpp"
#include "launcher/run/worker_streams.hpp"
#include "rendezvous/node_rendezvous.hpp"
#include "rendezvous/store_server.hpp"

namespace ddp::launcher {
namespace {

constexpr size_t kStderrTailLines = 10;
constexpr auto kLeftoverDeadline = std::chrono::seconds(5);
// Looks in a row that find no leftover before an attempt's cleanup is over.
constexpr int kEmptyLooks = 3;
// The last output at exit: given up on after this long without progress, or this long in all.
constexpr auto kOutputStall = std::chrono::seconds(5);
constexpr auto kOutputLimit = std::chrono::seconds(30);

long read_oom_kill_count() {
  std::ifstream vmstat("/proc/vmstat");
  std::string key;
  long value = 0;
  while (vmstat >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return -1;
}

std::string random_token() {
  std::random_device rd;
  return fmt::format("{}-{:08x}{:08x}", ::getpid(), rd(), rd());
}

std::optional<std::string> env_lookup(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
}

}  // namespace

Agent::Agent(AgentSetup setup, std::unique_ptr<ProcessControl> control,
             JobRendezvousFactory rendezvous)
    : setup_(std::move(setup)),
      child_signals_(io_, SIGCHLD),
      shutdown_signals_(io_),
      forwarded_signals_(io_),
      grace_timer_(io_),
      cleanup_timer_(io_),
      recheck_timer_(io_),
      verdict_timer_(io_),
      stdout_sink_(io_, STDOUT_FILENO),
      stderr_sink_(io_, STDERR_FILENO),
      control_(control ? std::move(control) : std::make_unique<PosixProcessControl>()),
      token_(random_token()),
      make_rendezvous_(std::move(rendezvous)) {
  // --signals-to-handle: these stop the job; SIGUSR1/SIGUSR2 not among them are only forwarded.
  // A default signal left out is not caught at all, as in torchrun.
  const auto& stop = setup_.config.stop_signals;
  for (int sig : stop) shutdown_signals_.add(sig);
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (std::find(stop.begin(), stop.end(), sig) == stop.end()) forwarded_signals_.add(sig);
  }
}

Agent::~Agent() {
  dispose(std::move(session_));
  for (auto& w : workers_) {
    if (w.out) w.out->finish();
    if (w.err) w.err->finish();
  }
}

void Agent::say(const std::string& line) {
  // A line may quote the job (a timer's scope id, a host name): its escapes are shown, not obeyed.
  stderr_sink_.write_all(fmt::format("ddprun: {}\n", visible_line(line)));
}

void Agent::on_log_error(const std::string& path, int error) {
  const std::string reason = std::strerror(error);
  say(fmt::format("cannot write '{}': {}; its output goes to the console from now on", path,
                  reason));
  events_.emit("log_error", {{"path", path}, {"error", reason}, {"errno", error}});
  log_errors_.push_back(
      fmt::format("{}: {} (what it did not take went to the console)", path, reason));
}

Result<Ok> Agent::prepare() {
  auto events = events_.open(setup_.config.events, io_, &stdout_sink_, &stderr_sink_);
  if (!events) return events.error();
  // A closed pipe (`ddprun ... | head`) is the reader's choice; anything else (stdout on a full
  // disk) is reported like a log file.
  stdout_sink_.on_error([this](int error, const std::string&) {
    if (error == EPIPE) return;
    say(fmt::format("cannot write to stdout: {}; no more output goes there", std::strerror(error)));
    log_errors_.push_back(
        fmt::format("stdout: {} (the rest of the output is lost)", std::strerror(error)));
  });
  events_.on_error([this](const std::string& path, int error) {
    const std::string reason = std::strerror(error);
    say(fmt::format("cannot write '{}': {}; no more events are written", path, reason));
    log_errors_.push_back(fmt::format("{} (--events): {} (no more events)", path, reason));
  });
  const auto& c = setup_.config;
  for (int r = 0; r < c.nproc_per_node; ++r) {
    bool filtered = c.console_ranks && !c.console_ranks->count(r);
    if (filtered || c.redirects.for_rank(r) != StreamSet::None ||
        c.tee.for_rank(r) != StreamSet::None) {
      keep_run_dir_ = true;
    }
  }
  // A hang verdict or an expired timer keeps the directory (the stacks are saved there), so it
  // must not be one that the orphan guard removes if ddprun is killed.
  const bool may_save_stacks = c.health.hang_timeout.count() > 0 || c.health.file_timer;
  auto dir = RunDirectory::create(c.log_dir, c.run_id, keep_run_dir_ || may_save_stacks);
  if (!dir) return dir.error();
  run_dir_ = std::move(*dir);
  if (keep_run_dir_ && run_dir_->temporary()) say(fmt::format("worker logs: {}", run_dir_->path()));
  // Before any worker exists. If ddprun is killed, the guard also removes a temporary run
  // directory that nobody asked to keep.
  const std::string scratch = keep_run_dir_ ? std::string() : run_dir_->temporary_base();
  for (const auto& warning : control_->begin_supervision(token_, scratch)) say(warning);
  if (!c.preload.empty()) begin_preload();
  auto store = open_store();
  if (!store) return store;
  health_ = make_health_monitor();
  return health_->open(run_dir_->path(), c.nproc_per_node, c.nnodes.max, setup_.host);
}

void Agent::begin_preload() {
  const auto& c = setup_.config;
  std::vector<EnvMap> per_rank;
  per_rank.reserve(static_cast<size_t>(c.nproc_per_node));
  for (int r = 0; r < c.nproc_per_node; ++r) {
    per_rank.push_back(worker_environment(c, WorkerSlot{r, 0, setup_.master_port, ""},
                                          setup_.parent_env, layout_));
  }
  EnvMap env = common_environment(per_rank);
  env[OrphanGuard::kTokenVariable] = token_;  // the orphan guard finds it as one of the run's
  auto workers = parse_python_invocation(setup_.argv);
  std::variant<int, std::string> begun = std::string("not a Python command line");
  if (workers) {
    ZygoteSetup zygote{setup_.executable, *workers, c.preload, to_envp_strings(env)};
    zygote.ready_timeout = c.preload_timeout;
    begun = control_->begin_preload(zygote);
  }
  if (auto* reason = std::get_if<std::string>(&begun)) {
    on_preload_disabled(*reason);
    return;
  }
  // A copy: the zygote's socket stays the process control's.
  const int fd = ::fcntl(std::get<int>(begun), F_DUPFD_CLOEXEC, 3);
  if (fd < 0) {
    const std::string why =
        fmt::format("cannot watch the preloaded interpreter: {}", std::strerror(errno));
    control_->finish_preload(why);
    on_preload_disabled(why);
    return;
  }
  preload_answer_ = std::make_unique<boost::asio::posix::stream_descriptor>(io_, fd);
  preload_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
}

void Agent::await_preload() {
  preload_answer_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                              [this](const boost::system::error_code& ec) {
                                if (ec || !preload_answer_) return;
                                settle_preload(std::nullopt);
                              });
  preload_timer_->expires_after(setup_.config.preload_timeout);
  preload_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || !preload_answer_) return;
    settle_preload(
        fmt::format("the preloaded modules did not finish importing within {:.3g} s "
                    "(--preload-timeout)",
                    setup_.config.preload_timeout.count() / 1000.0));
  });
}

void Agent::settle_preload(const std::optional<std::string>& give_up) {
  preload_answer_.reset();  // cancels the other wait
  if (preload_timer_) preload_timer_->cancel();
  auto ready = control_->finish_preload(give_up);
  if (interrupted_) {
    // No attempt follows; the zygote is gone with the run.
  } else if (auto* reason = std::get_if<std::string>(&ready)) {
    on_preload_disabled(*reason);
  } else {
    events_.emit("preload", {{"modules", setup_.config.preload},
                             {"import_s", std::get<ZygoteReady>(ready).import_seconds}});
  }
  boost::asio::post(io_, [this] { start_attempt(0); });
}

void Agent::on_preload_disabled(const std::string& reason) {
  say(fmt::format("--preload: {}; starting the workers without it", reason));
  events_.emit("preload_disabled", {{"reason", reason}});
}

int Agent::run() {
  start_time_ = std::chrono::system_clock::now();
  auto ready = prepare();
  if (!ready) {
    say(ready.error().message);
    OutputSink::drain_all(io_, kOutputStall, kOutputLimit);
    control_->end_supervision();
    // The run directory may already exist (e.g. the store's port was taken after it was made).
    if (run_dir_ && !keep_run_dir_) run_dir_->remove_if_temporary();
    return ready.error().exit_code;
  }
  const auto& c = setup_.config;
  events_.emit("launch", {{"program", c.program},
                          {"argv", setup_.argv},
                          {"nproc_per_node", c.nproc_per_node},
                          {"nnodes", c.nnodes.max},
                          {"node_rank", c.node_rank},
                          {"world_size", c.world_size()},
                          {"master_addr", c.master_addr},
                          {"master_port", setup_.master_port},
                          {"run_id", c.run_id},
                          {"max_restarts", c.max_restarts},
                          {"log_dir", run_dir_->path()},
                          {"pid", ::getpid()}});
  const StorePlan& plan = setup_.store;
  events_.emit("store", {{"role", store_ ? "host" : "client"},
                         {"address", store_ ? plan.bind_address : plan.connect_host},
                         {"port", setup_.master_port}});
  wait_for_children();
  wait_for_shutdown_signals();
  wait_for_forwarded_signals();
  if (preload_answer_) {
    await_preload();  // the first attempt starts once the imports have answered
  } else {
    boost::asio::post(io_, [this] { start_attempt(0); });
  }
  io_.run();
  // Whatever the sinks could not take yet (the summary included) goes out now, on the same loop
  // (the hosted store has its own); bounded, so that a console nobody reads cannot keep ddprun.
  if (size_t lost = OutputSink::drain_all(io_, kOutputStall, kOutputLimit);
      lost > 0 && !stderr_sink_.failed() && stderr_sink_.idle()) {
    say(fmt::format(
        "gave up on {} byte(s) of output that nobody took (no progress for {} s, or {} s "
        "in all)",
        lost, kOutputStall.count(), kOutputLimit.count()));
    OutputSink::drain_all(io_, std::chrono::seconds(1), std::chrono::seconds(1));
  }
  control_->end_supervision();
  if (!keep_run_dir_) run_dir_->remove_if_temporary();
  return exit_code();
}

void Agent::wait_for_children() {
  child_signals_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec || phase_ == Phase::Done) return;
    on_children_exited();
    if (phase_ != Phase::Done) wait_for_children();
  });
}

void Agent::wait_for_shutdown_signals() {
  shutdown_signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec || phase_ == Phase::Done) return;
    on_shutdown_signal(sig);
    if (phase_ != Phase::Done) wait_for_shutdown_signals();
  });
}

void Agent::wait_for_forwarded_signals() {
  forwarded_signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec || phase_ == Phase::Done) return;
    // Unlike torchrun, which stops the job: the workers decide (checkpoint, carry on or exit).
    int count = 0;
    for (auto& w : workers_) {
      if (!w.alive) continue;
      control_->signal_worker(w.pgid, sig);
      ++count;
    }
    events_.emit("signal_forwarded", {{"signal", signal_name(sig)}, {"workers", count}});
    say(fmt::format("forwarded {} to {} worker(s)", signal_name(sig), count));
    wait_for_forwarded_signals();
  });
}

void Agent::start_attempt(int attempt) {
  if (interrupted_) {  // a signal arrived between two attempts: no new attempt
    finish_run();
    return;
  }
  if (!session_) {
    if (attempt > 0 && store_) clear_last_attempts_keys();
    launch_workers(attempt);
    return;
  }
  phase_ = Phase::Starting;
  store_lost_in_join_.reset();
  pending_.clear();  // the next round's monitor reports them afresh (some were just invited)
  next_round_.restarts_used = restarts_used_;
  next_round_.rescales_used = rescales_used_;
  session_->join(attempt, next_round_, [this, attempt](const JobRendezvous::JoinResult& result) {
    on_joined(attempt, result);
  });
}

void Agent::clear_last_attempts_keys() {
  // Every worker of the last attempt is reaped, so none can write any more (multi-node: the
  // rendezvous does the same for the whole job once a round has formed, see NodeSession::join).
  rdzv::StoreClientOptions own;
  own.host = setup_.store.connect_host;
  own.port = static_cast<std::uint16_t>(setup_.master_port);
  own.connect_timeout = own.timeout = std::chrono::seconds(5);
  try {
    rdzv::StoreClient client(own);
    rdzv::clear_worker_keys(client);
  } catch (const std::exception& e) {
    say(fmt::format(
        "could not clear the last attempt's keys from the store at {}:{}: {} (torch 2.x "
        "workers may read stale addresses)",
        own.host, own.port, e.what()));
  }
}

void Agent::launch_workers(int attempt) {
  attempt_ = attempt;
  phase_ = Phase::Running;
  own_failures_in_a_row_ = failed_here_ ? own_failures_in_a_row_ + 1 : 0;
  failed_here_ = false;
  root_cause_.reset();
  oom_kills_at_start_ = read_oom_kill_count();
  const auto& c = setup_.config;
  auto made = run_dir_->create_attempt(attempt, c.nproc_per_node);
  if (!made) {
    say(made.error().message);
    end_with(internal_error(made.error().exit_code, made.error().message));
    finish_run();
    return;
  }
  workers_.clear();
  workers_.resize(c.nproc_per_node);
  for (int r = 0; r < c.nproc_per_node; ++r) {
    Worker& w = workers_[r];
    w.outcome.local_rank = r;
    w.outcome.rank = global_rank(c, layout_, r);
    w.outcome.error_file = run_dir_->rank_dir(attempt, r) + "/error.json";
  }
  // Fork every worker first and only then wait for their execs, so the execs overlap.
  for (auto& w : workers_) {
    start_worker(w, attempt);
    if (phase_ != Phase::Running) break;  // a worker could not start: the others stop
  }
  for (auto& w : workers_) confirm_exec(w);
  if (auto notice = control_->take_preload_notice()) on_preload_disabled(*notice);
  health_notes_.clear();
  if (phase_ == Phase::Running) {
    std::vector<health::MonitoredWorker> monitored;
    for (const auto& w : workers_) {
      monitored.push_back({w.outcome.rank, w.outcome.local_rank, w.outcome.pid,
                           run_dir_->rank_dir(attempt, w.outcome.local_rank)});
    }
    health_->attempt_started(attempt, monitored, layout_ && layout_->num_nodes > 1);
  }
  after_worker_exit();  // every worker may already be gone (start failures)
}

void Agent::follow_round_store(const rdzv::RendezvousResult& round) {
  const auto port = static_cast<std::uint16_t>(round.master_port);
  if (proxy_ && proxy_->root_host() == round.master_addr && proxy_->root_port() == port) return;
  proxy_.reset();  // the last attempt's store is gone with its round, and so are its workers
  try {
    proxy_ = std::make_unique<NodeStoreProxy>(round.master_addr, port,
                                              setup_.config.store_proxy_max_watched_keys);
  } catch (const std::runtime_error& e) {
    say(fmt::format("--store-proxy: {}; the workers connect to the store directly", e.what()));
  }
}

void Agent::start_worker(Worker& w, int attempt) {
  const auto& c = setup_.config;
  const int r = w.outcome.local_rank;
  auto streams = WorkerStreams::open(
      io_, c, r, run_dir_->rank_dir(attempt, r), run_dir_->attempt_dir(attempt), stdout_sink_,
      stderr_sink_, [this](const std::string& path, int error) { on_log_error(path, error); });
  if (!streams) {
    record_start_failure(w, streams.error());
    return;
  }
  streams->on_line(health_->output_hook(r));
  WorkerSlot slot{r, attempt, setup_.master_port, w.outcome.error_file};
  if (round_ && round_->master_port > 0) {  // etcd: this round's node 0 serves the workers
    slot.master_addr = round_->master_addr;
    slot.master_port = round_->master_port;
    if (c.store_proxy && c.use_agent_store) follow_round_store(*round_);
  }
  if (proxy_) {
    if (auto why = proxy_->refusal()) {
      say(
          fmt::format("--store-proxy: the root store does not take ddprun's tagged mode ({}); "
                      "the workers connect to it directly",
                      *why));
      proxy_.reset();
    }
  }
  if (proxy_) {
    slot.master_addr = "127.0.0.1";
    slot.master_port = proxy_->port();
  }
  EnvMap env = worker_environment(c, slot, setup_.parent_env, layout_);
  env[OrphanGuard::kTokenVariable] = token_;
  for (auto& [key, value] : health_->worker_environment(r)) env[key] = value;
  SpawnRequest request{setup_.executable, setup_.argv, to_envp_strings(env),
                       streams->worker_stdout(), streams->worker_stderr()};
  if (r < static_cast<int>(c.numa_placements.size())) {  // --numa-binding
    request.cpu_affinity = c.numa_placements[r].cpus;
    request.preferred_memory_node = c.numa_placements[r].node;
  }
  auto started = control_->start(request);
  const PrefixFields fields{c.role, w.outcome.rank, r, setup_.host};
  auto pumps = streams->start(io_, c.line_prefix, c.color, fields,
                              env_lookup(setup_.parent_env, "NO_COLOR"));
  w.out = std::move(pumps.out);
  w.err = std::move(pumps.err);
  if (!started) {
    record_start_failure(w, started.error());
    return;
  }
  w.outcome.pid = started->pid;
  w.pgid = started->pid;
  w.alive = true;
  w.exec_report_fd = started->exec_report_fd;
  control_->watch_group(w.pgid);
}

void Agent::confirm_exec(Worker& w) {
  if (w.exec_report_fd < 0) return;
  auto execed =
      control_->await_exec(StartedProcess{w.outcome.pid, w.exec_report_fd}, setup_.executable);
  w.exec_report_fd = -1;
  if (!execed) {
    w.alive = false;  // await_exec reaped it
    record_start_failure(w, execed.error());
    return;
  }
  events_.emit("worker_start", {{"rank", w.outcome.rank},
                                {"local_rank", w.outcome.local_rank},
                                {"attempt", attempt_},
                                {"pid", w.outcome.pid}});
  if (phase_ == Phase::Stopping) {  // another rank failed to start meanwhile
    w.outcome.terminated_by_ddprun = true;
    control_->signal_worker(w.pgid, SIGTERM);
  }
}

void Agent::record_start_failure(Worker& w, const Error& error) {
  say(error.message);
  w.outcome.status = ExitStatus::exited(error.exit_code);
  w.outcome.start_error = error.message;
  w.outcome.terminated_by_ddprun = false;  // a stop sent before its exec failed changed nothing
  w.outcome.exit_time = std::chrono::system_clock::now();
  events_.emit("worker_exit",
               start_failure_fields(w.outcome, attempt_, error.exit_code, error.message));
  if (!root_cause_) on_local_failure(w);
  if (error.exit_code == exit_codes::kInternal)
    end_with(internal_error(error.exit_code, error.message));
  stop_workers(SIGTERM);
}

Agent::Worker* Agent::find_worker(pid_t pid) {
  for (auto& w : workers_) {
    if (w.alive && w.outcome.pid == pid) return &w;
  }
  return nullptr;
}

bool Agent::any_alive() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.alive; });
}

void Agent::on_children_exited() {
  for (const auto& child : control_->reap_exited()) {
    // Inherited orphans and the guard are reaped too; only workers matter here.
    if (Worker* w = find_worker(child.pid))
      on_worker_exit(*w, exit_status_from_wait(child.wait_status));
  }
  after_worker_exit();
}

void Agent::on_worker_exit(Worker& w, const ExitStatus& status) {
  w.alive = false;
  w.out->drain();
  w.err->drain();
  w.outcome.status = status;
  w.outcome.exit_time = std::chrono::system_clock::now();
  if (status.kind == ExitStatus::Kind::Signaled && status.signal == SIGKILL &&
      !w.outcome.terminated_by_ddprun && oom_kills_at_start_ >= 0) {
    w.outcome.oom_killed = read_oom_kill_count() > oom_kills_at_start_;
  }
  events_.emit("worker_exit", worker_exit_fields(w.outcome, attempt_));
  health_->worker_exited(w.outcome.local_rank, status, w.outcome.terminated_by_ddprun);
  if (!status.success() && phase_ == Phase::Running && !root_cause_) {
    on_local_failure(w);
    if (any_alive()) {
      say(fmt::format("rank {} (pid {}) failed with {}; stopping the other workers", w.outcome.rank,
                      w.outcome.pid, describe(status)));
    }
    stop_workers(SIGTERM);
  }
}

void Agent::on_shutdown_signal(int sig) {
  events_.emit("signal", {{"signal", signal_name(sig)}});
  if (interrupted_) {
    say(fmt::format("received {} again; killing the workers now", signal_name(sig)));
    kill_everything_now();
    return;
  }
  interrupted_ = true;
  end_with(interrupted(sig));
  if (preload_answer_) {  // before the first attempt, while the preloaded modules import
    say(fmt::format("received {} while the preloaded modules import; finishing", signal_name(sig)));
    settle_preload(std::string("interrupted"));
    return;
  }
  if (session_) session_->cancel_waits();
  release_held_failure();  // no verdict waited for: the others learn of the failure now
  if (phase_ == Phase::Starting && session_ && session_->busy()) {
    say(fmt::format("received {} while waiting for the other nodes; giving up", signal_name(sig)));
    finish_run();
    return;
  }
  if (phase_ == Phase::Running || phase_ == Phase::Stopping) {
    say(
        fmt::format("received {}; passing it to the workers (SIGKILL after {:.3g} s; "
                    "Ctrl-C again to kill now)",
                    signal_name(sig), setup_.config.shutdown_timeout.count() / 1000.0));
    stop_workers(sig);
  } else {
    say(fmt::format("received {}; finishing without starting another attempt", signal_name(sig)));
  }
}

void Agent::stop_workers(int sig) {
  if (health_->dumping() && phase_ == Phase::Running) {
    // No rank is signalled while its stack tool is attached (docs/health.md): the stop waits
    // for the dump, which its own limit bounds. A second Ctrl-C still kills at once.
    if (!stop_after_dump_) {
      say("the workers' stacks are being saved; they are stopped once that is done");
      health_->after_dump([this] {
        const int deferred = *std::exchange(stop_after_dump_, std::nullopt);
        if (phase_ == Phase::Running || phase_ == Phase::Stopping) stop_workers(deferred);
      });
    }
    stop_after_dump_ = sig;
    return;
  }
  const bool first = phase_ == Phase::Running;
  phase_ = Phase::Stopping;
  health_->stopping();
  for (auto& w : workers_) {
    if (w.alive && w.exec_report_fd >= 0) {
      continue;  // not started yet: confirm_exec() stops it once its exec is confirmed
    } else if (w.alive) {
      w.outcome.terminated_by_ddprun = true;
      control_->signal_worker(w.pgid, sig);
      // A stopped (SIGSTOP, Ctrl-Z) worker would hold the signal until the grace runs out:
      // continue it so that it handles the signal now, as Slurm does.
      control_->signal_worker(w.pgid, SIGCONT);
    } else if (w.pgid > 0) {
      control_->signal_group(w.pgid, sig);  // what the dead worker left in its group
      control_->signal_group(w.pgid, SIGCONT);
    }
  }
  if (!first) return;  // the deadline set by the first stop stands
  grace_timer_.expires_after(setup_.config.shutdown_timeout);
  grace_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || phase_ != Phase::Stopping) return;
    say(fmt::format("workers still running {:.3g} s after the stop signal; sending SIGKILL",
                    setup_.config.shutdown_timeout.count() / 1000.0));
    kill_everything_now();
  });
}

void Agent::kill_everything_now() {
  for (auto& w : workers_) {
    if (w.alive) {
      w.outcome.terminated_by_ddprun = true;
      control_->signal_worker(w.pgid, SIGKILL);
    } else if (w.pgid > 0) {
      control_->signal_group(w.pgid, SIGKILL);
    }
  }
  for (pid_t child : leftovers()) control_->signal_process(child, SIGKILL);
  control_->kill_job();
}

std::vector<pid_t> Agent::leftovers() {
  std::vector<pid_t> pids = control_->live_children();
  // The stack dumper's tools are ddprun's own children, not something a worker left.
  for (pid_t tool : health_->stack_tools()) std::erase(pids, tool);
  return pids;
}

void Agent::after_worker_exit() {
  // Starting: a late SIGCHLD between two attempts must not end the attempt a second time.
  if (phase_ == Phase::Done || phase_ == Phase::Starting || phase_ == Phase::Finishing ||
      phase_ == Phase::Awaiting || any_alive()) {
    return;
  }
  if (phase_ != Phase::Cleaning) {
    grace_timer_.cancel();
    phase_ = Phase::Cleaning;
    leftover_rounds_ = 0;
    empty_looks_ = 0;
    arm_leftover_deadline(kLeftoverDeadline);
  }
  clean_up_leftovers();
}

void Agent::arm_leftover_deadline(std::chrono::milliseconds after) {
  cleanup_timer_.expires_after(after);
  cleanup_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || phase_ != Phase::Cleaning) return;
    if (health_->dumping()) {
      // The stack dump still runs (its own limit bounds it): not a process stuck in the kernel.
      arm_leftover_deadline(std::chrono::milliseconds(500));
      return;
    }
    say("warning: some leftover processes did not die within 5 s of SIGKILL (stuck in the "
        "kernel?)");
    finish_attempt();
  });
}

void Agent::clean_up_leftovers() {
  // Every worker is reaped, so any child left is an orphan the workers left behind, re-parented
  // to ddprun (the subreaper). Kill it; its own children come to us next and go the same way.
  std::vector<pid_t> left = leftovers();
  if (left.empty()) {
    // One empty look proves little: the kernel's list of children is not a snapshot, and a
    // process that hops pids (fork, exit, again) is between two entries now and then. The
    // attempt ends after a few empty looks in a row, and once a stack dump still running (the
    // attempt's evidence) has ended within its own limit.
    if (++empty_looks_ < kEmptyLooks || !health_->stack_tools().empty()) {
      look_for_leftovers_again(std::chrono::milliseconds(5));
      return;
    }
    finish_attempt();
    return;
  }
  empty_looks_ = 0;
  for (auto& w : workers_) {
    if (w.pgid > 0) control_->signal_group(w.pgid, SIGKILL);
  }
  for (pid_t pid : left) control_->signal_process(pid, SIGKILL);
  control_->kill_job();
  // A leftover that is not ddprun's child (it lives under a subreaper of its own, found through
  // the job cgroup) sends no SIGCHLD here: look again shortly.
  look_for_leftovers_again(std::chrono::milliseconds(20));
  if (leftover_rounds_++ == 0) {
    say(fmt::format("killing {} process(es) the workers left running (pid {}{})", left.size(),
                    left.front(), left.size() > 1 ? ", ..." : ""));
  }
  events_.emit("leftovers_killed", {{"pids", left}, {"attempt", attempt_}});
  // The SIGCHLD of each death brings us back here through after_worker_exit().
}

void Agent::look_for_leftovers_again(std::chrono::milliseconds after) {
  recheck_timer_.expires_after(after);
  recheck_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && phase_ == Phase::Cleaning) clean_up_leftovers();
  });
}

void Agent::finish_attempt() {
  cleanup_timer_.cancel();
  recheck_timer_.cancel();
  control_->end_attempt();
  AttemptOutcome outcome;
  outcome.attempt = attempt_;
  outcome.root_cause = root_cause_;
  for (auto& w : workers_) {
    if (w.out) w.out->finish();
    if (w.err) {
      w.err->finish();
      w.outcome.stderr_tail = w.err->tail_lines(kStderrTailLines);
    }
    std::string why;
    if (auto error_json = read_error_file(w.outcome.error_file, &why)) {
      w.outcome.error_info = parse_error_file(*error_json, &why);
      if (!w.outcome.error_info) w.outcome.error_file_unread = why;
    } else if (!why.empty()) {
      w.outcome.error_file_unread = why;
      say(fmt::format("rank {}: ignoring its error file {}: {}", w.outcome.rank,
                      w.outcome.error_file, why));
    }
    // The view's failures (/status): a rank that failed on its own, with its message.
    const auto& st = w.outcome.status;
    if (health_ && st && !st->success() && !w.outcome.terminated_by_ddprun) {
      health::RankFailure f{attempt_,
                            w.outcome.rank,
                            w.outcome.local_rank,
                            st->kind == ExitStatus::Kind::Signaled ? signal_name(st->signal)
                                                                   : std::to_string(st->code),
                            {},
                            {},
                            w.outcome.stderr_tail};
      if (w.outcome.error_info) {
        f.message = w.outcome.error_info->message;
        f.traceback = w.outcome.error_info->traceback;
      }
      // This node's first failure is the root cause until the job's decision says otherwise
      // (attempt_cause() in after_attempt); a rank that failed after it is its consequence.
      const size_t index = static_cast<size_t>(&w - workers_.data());
      f.root_cause = root_cause_ && *root_cause_ == index;
      if (!f.root_cause && root_cause_) f.cause_rank = workers_[*root_cause_].outcome.rank;
      if (!f.root_cause && end_) f.cause = end_->text;
      health_->rank_failed(std::move(f));
    }
    outcome.workers.push_back(w.outcome);
  }
  history_.push_back(std::move(outcome));
  if (session_ && !end_) {
    // This node is done; the job is done when every node is (another may still fail).
    phase_ = Phase::Finishing;
    session_->exit_barrier(
        [this](const JobRendezvous::BarrierResult& result) { on_barrier(result); });
    return;
  }
  after_attempt();
}

bool Agent::end_with(RunEnd cause) { return offer(end_, std::move(cause)); }

void Agent::note_attempt_cause() {
  if (!health_ || !end_) return;
  // The decision the failure summary prints: this node's first failure when it stands, else the
  // job-wide cause another node's stop or loss named (that node's record names its rank).
  const int here = session_ && layout_ ? layout_->node_rank : 0;
  health::AttemptCause cause{-1, -1, end_->text};
  if (end_->kind == RunEndKind::WorkerFailed && root_cause_) {
    cause.node_rank = here;
    cause.rank = workers_[*root_cause_].outcome.rank;
  } else if ((end_->kind == RunEndKind::JobStopped || end_->kind == RunEndKind::NodeLost) &&
             end_->node_rank >= 0 && end_->node_rank != here) {
    cause.node_rank = end_->node_rank;
  } else {
    return;  // a signal, a hang, a re-form: no rank's failure to place the others under
  }
  health_->attempt_cause(attempt_, cause);
}

void Agent::after_attempt() {
  const NextStep step =
      next_step(end_, AttemptFlags{held_failure_.has_value(), quarantined_, interrupted_,
                                   restarts_used_, setup_.config.max_restarts});
  if (step != NextStep::AwaitVerdict) {
    if (end_ && !history_.empty() && history_.back().attempt == attempt_)
      history_.back().cause = end_->text;  // decided now (a held failure waited for the verdict)
    note_attempt_cause();
  }
  switch (step) {
    case NextStep::AwaitVerdict:
      phase_ = Phase::Awaiting;
      return;
    case NextStep::Reform:
      begin_reform();
      return;
    case NextStep::Restart:
      if (auto why = health_->attempt_failed()) {  // --no-progress-restarts: restarts do not help
        say(*why);
        health_notes_.push_back(*why);
        finish_run();
        return;
      }
      begin_restart();
      return;
    case NextStep::Leave:  // the others re-form without this node
    case NextStep::Finish:
      finish_run();
      return;
  }
}

void Agent::begin_restart() {
  ++restarts_used_;
  say(fmt::format("{}; restarting the workers{} (restart {} of {})", end_->text,
                  session_ ? " on every node" : "", restarts_used_, setup_.config.max_restarts));
  nlohmann::json fields{{"attempt", attempt_ + 1}};
  if (root_cause_) fields["failed_rank"] = workers_[*root_cause_].outcome.rank;
  if (session_) fields["job_root_cause"] = end_->text;
  events_.emit("restart", fields);
  next_round_ = restart_plan(next_round_, !setup_.multinode || setup_.multinode->dynamic, round_);
  if (round_) restart_from_ = round_left();
  if (session_ && layout_ && layout_->node_rank == 0 && round_) {
    // Pending nodes that fit meet the others in the restart's round (admit=restart's moment).
    for (const auto& answer :
         restart_admissions(elastic_policy(), round_->num_nodes, attempt_ + 1, pending_))
      session_->answer_pending(answer);
  }
  end_.reset();
  phase_ = Phase::Starting;
  boost::asio::post(io_, [this, next = attempt_ + 1] { start_attempt(next); });
}

int Agent::exit_code() const {
  if (end_) return end_->exit_code;
  // The job succeeded, but output the user asked to keep in a file is not all there.
  if (!log_errors_.empty()) return exit_codes::kCannotWrite;
  return exit_codes::kSuccess;
}

void Agent::copy_root_cause_error_file() {
  // torchrun's @record on its own main: a job script reads the launcher's error file.
  auto destination = env_lookup(setup_.parent_env, "TORCHELASTIC_ERROR_FILE");
  if (!destination || destination->empty() || history_.empty()) return;
  const AttemptOutcome& last = history_.back();
  if (!last.root_cause) return;
  const WorkerOutcome& w = last.workers[*last.root_cause];
  auto text = read_error_file(w.error_file);
  if (!text || !w.status) return;  // torchrun too writes nothing without the worker's file
  const int code =
      w.status->kind == ExitStatus::Kind::Signaled ? -w.status->signal : w.status->code;
  if (auto copied = copy_error_file(*text, code, *destination); !copied) {
    say(copied.error().message);
  }
}

void Agent::finish_run() {
  phase_ = Phase::Done;
  grace_timer_.cancel();
  cleanup_timer_.cancel();
  verdict_timer_.cancel();
  const int code = exit_code();
  const int signal = end_ && end_->kind == RunEndKind::Interrupted ? end_->signal : 0;
  RunSummaryInput summary{setup_.config.program,
                          setup_.host,
                          setup_.config.max_restarts,
                          start_time_,
                          history_,
                          signal,
                          code,
                          {},
                          log_errors_,
                          health_notes_};
  const bool job_wide =
      end_ && (end_->kind == RunEndKind::WorkerFailed || end_->kind == RunEndKind::Hung ||
               end_->kind == RunEndKind::JobStopped || end_->kind == RunEndKind::NodeLost);
  if (session_ && job_wide) summary.job_root_cause = end_->text;
  if (health_) health_->finish(code == 0);
  if (code != 0) {
    stderr_sink_.write_all(format_failure_summary(summary));
    copy_root_cause_error_file();
  }
  nlohmann::json fields = summary_fields(code, history_, end_, summary.job_root_cause);
  if (!log_errors_.empty()) fields["log_errors"] = log_errors_;
  if (!health_notes_.empty()) fields["health"] = health_notes_;
  // Hung here, or stopped by another node's hang verdict (the same code on every node).
  const bool hung_elsewhere =
      end_ && end_->kind == RunEndKind::JobStopped && end_->exit_code == exit_codes::kHung;
  if (end_ && (end_->kind == RunEndKind::Hung || hung_elsewhere)) fields["hung"] = true;
  if (!membership_changes_.empty()) fields["membership_changes"] = membership_changes_;
  events_.emit("summary", fields);
  // After a lost node or store there is nobody to tell and perhaps no store to tell it through.
  if (session_ && !session_->busy() && !(end_ && end_->kind == RunEndKind::NodeLost)) {
    // Pending nodes and spares would otherwise wait for their join timeout.
    if (layout_ && layout_->node_rank == 0) {
      for (const auto& p : pending_) {
        session_->answer_pending(
            {PendingAnswer::Kind::Refused, p.seq, "the job ended before it needed this node", 0});
      }
    }
    // The store's host stays up until the others have read the outcome (bounded).
    session_->leave(store_ != nullptr, [this] { end_loop(); });
    return;
  }
  end_loop();
}

void Agent::end_loop() {
  // A viewer of the status endpoint sees the end (--status-linger), then the loop ends; not
  // when a signal to ddprun ended the job (whoever sent it waits for us to exit).
  if (health_) return health_->linger([this] { io_.stop(); }, interrupted_);
  io_.stop();
}

}  // namespace ddp::launcher
