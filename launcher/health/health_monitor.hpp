// SPDX-License-Identifier: MIT
#pragma once
/// HealthMonitor: everything the Agent needs to know about the health of its workers, on the
/// Agent's loop, behind a few calls. It owns the heartbeat sockets, torchrun's file timer server,
/// the stack dumper and the status endpoint, and applies the pure decisions (ProgressTracker and
/// the hang verdict, stragglers, no-progress restarts, timer deadlines).
///
/// It never signals a worker itself: it saves the stacks, then tells the Agent what to do
/// (Hooks::on_hung, Hooks::on_timer_expired), and the Agent stops the job as for a failure.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "launcher/common/result.hpp"
#include "launcher/health/failure_log.hpp"
#include "launcher/health/file_timer_server.hpp"
#include "launcher/health/hang_verdict.hpp"
#include "launcher/health/health_settings.hpp"
#include "launcher/health/heartbeat_socket.hpp"
#include "launcher/health/job_view.hpp"
#include "launcher/health/no_progress_restarts.hpp"
#include "launcher/health/progress_tracker.hpp"
#include "launcher/health/prometheus_text.hpp"
#include "launcher/health/rank_usage.hpp"
#include "launcher/health/recent_events.hpp"
#include "launcher/health/stack_dumper.hpp"
#include "launcher/health/status_beacon.hpp"
#include "launcher/health/status_server.hpp"
#include "launcher/health/step_history.hpp"
#include "launcher/health/straggler_detector.hpp"
#include "launcher/status/exit_status.hpp"

namespace ddp::launcher::health {

/// A local worker as the monitor sees it.
struct MonitoredWorker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  std::string log_dir;  // stacks.txt goes here
};

/// What the summary says about a hang or an expired timer.
struct HealthStop {
  std::string text;                  // one line: what happened
  std::vector<std::string> details;  // suspects, stack files
};

class HealthMonitor {
 public:
  struct Hooks {
    std::function<void(const std::string&)> say;                         // one "ddprun: ..." line
    std::function<void(const char* event, nlohmann::json fields)> emit;  // an --events line
    /// The job is hung; its stacks are saved. Stop it as failed (exit 75).
    std::function<void(const HealthStop&)> on_hung;
    /// The hang verdict (its one line), before the stacks are saved: the attempt's end from now
    /// on, whatever fails while the stacks are saved.
    std::function<void(const std::string& text)> on_hang_verdict;
    /// A watchdog timer of `pid` expired; stacks are saved. Signal it with `sig`, as torchrun.
    std::function<void(pid_t pid, int sig, const HealthStop&)> on_timer_expired;
    /// Multi-node: this node's progress in the attempt changed (`events`: progress events that
    /// counted so far, `best_step`: the highest step of the local ranks, `all_started`: every
    /// live local rank has shown progress), for the other nodes.
    /// Called on every such event: keep it cheap. Unset on a single node.
    std::function<void(long long events, std::optional<long long> best_step, bool all_started)>
        on_progress;
    /// More families for /metrics, appended at the end (the hosted store's counters).
    std::function<void(PrometheusText&)> extra_metrics;
    /// The job's digest and recent events for /status ("job", "events": RecentEvents).
    std::function<const RecentEvents*()> history;
    /// Multi-node: this node's record for the other nodes' job-wide view (job_view.hpp), every
    /// second while the run lasts. Unset on a single node.
    std::function<void(std::string record)> publish_view;
    /// The last `lines` lines a local rank wrote on stderr (GET /log/<rank>); optional.
    std::function<std::vector<std::string>(int local_rank, size_t lines)> stderr_tail;
    /// The same of its stdout (GET /log/<rank>/stdout); optional.
    std::function<std::vector<std::string>(int local_rank, size_t lines)> stdout_tail;
  };

  HealthMonitor(boost::asio::io_context& io, HealthSettings settings, Hooks hooks,
                const std::string& path_variable);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  /// Before the first worker: the heartbeat sockets (one per local rank) and the status socket
  /// in `socket_dir` (or a short directory when its paths would not fit in a socket address),
  /// the timer FIFO and the status endpoint. `nnodes` and `host` are for /status.
  Result<Ok> open(const std::string& socket_dir, int nproc_per_node, int nnodes,
                  const std::string& host);
  /// The variables each worker gets: DDPRUN_HEARTBEAT_SOCKET, TORCHELASTIC_TIMER_FILE.
  std::map<std::string, std::string> worker_environment(int local_rank) const;
  /// Called by a worker's output pump for each chunk that ends one line or more.
  std::function<void()> output_hook(int local_rank);

  /// `other_nodes`: the attempt's round has other nodes (their ranks start when they say so).
  void attempt_started(int attempt, const std::vector<MonitoredWorker>& workers,
                       bool other_nodes = false);
  void worker_exited(int local_rank, const ExitStatus& status, bool terminated_by_ddprun);
  /// Multi-node: another node's ranks made progress (its published count changed); `best_step`:
  /// the highest step any other node published in this attempt; `others_started`: every other
  /// node said all its ranks have started (ends the startup timeout with ours). Makes the verdict
  /// job-wide.
  void progress_elsewhere(std::optional<long long> best_step, bool others_started = true);
  /// Multi-node: the other nodes of the round, their records as read from the store and whether
  /// each is lost (the whole list each time). /status merges them with this node's ranks.
  struct NodeRecord {
    int node_rank = 0;
    std::string name;
    std::string record;
    bool lost = false;
  };
  void node_records(const std::vector<NodeRecord>& others);
  /// A local rank failed in this attempt (its error file and stderr read): kept for /status
  /// ("failures") across restarts, bounded (failure_log.hpp).
  void rank_failed(RankFailure failure);
  /// The attempt ended for `cause`, as the Agent decided (the failure summary's root cause, the
  /// job-wide one on several nodes): /status places its failures under it (FailureLog::settle).
  void attempt_cause(int attempt, const AttemptCause& cause);
  /// The Agent is stopping the workers (failure, signal); /healthz answers 503 from now on.
  void stopping();
  /// Multi-node: another node judged the job hung. Saves the local stacks (as for a local
  /// verdict), then calls `then` with what to put in the summary.
  void hung_elsewhere(const std::string& text, const std::function<void(const HealthStop&)>& then);
  /// The attempt ended in failure. Returns why no restart should be made (no progress), if so.
  std::optional<std::string> attempt_failed();
  /// The run is over (`succeeded` or not). Closes everything but the status endpoint when it is
  /// to linger (a viewer asked for /status during the run, --status-linger is not 0).
  void finish(bool succeeded);
  /// After the summary: calls `done` once the status endpoint has served the final state for
  /// --status-linger (at once when it does not linger, or when `ended_by_signal`: the operator
  /// who stopped ddprun, or a pod's grace period, does not wait for a viewer); SIGINT, SIGTERM
  /// or SIGHUP cut it short. Says one line when it lingers.
  void linger(std::function<void()> done, bool ended_by_signal = false);
  /// The stack tools still running: ddprun's children, but not the workers' leftovers.
  std::vector<pid_t> stack_tools() const;
  /// Whether a stack dump runs now: no rank may be signalled while its tool is attached.
  bool dumping() const;
  /// Calls `then` once the running dump has ended (posted at once when none runs).
  void after_dump(std::function<void()> then);

  // For /status, /metrics and tests.
  const ProgressTracker& progress() const { return tracker_; }
  int status_port() const { return status_port_; }
  HttpAnswer answer(const std::string& target) const;

 private:
  enum class Phase { Starting, Running, Hung, Stopping, Succeeded, Failed };
  static const char* phase_name(Phase phase);

  void on_heartbeat(int local_rank, size_t count, std::optional<long long> step);
  void record_progress(int local_rank, ProgressSource source, std::optional<long long> step);
  void on_timer_request(const TimerRequest& request);
  void on_timers_expired(const std::vector<ExpiredTimer>& expired);
  HangTimeouts hang_timeouts() const {
    return {settings_.hang_timeout, settings_.hang_startup_timeout};
  }
  void schedule_hang_check();
  void check_hang();
  void schedule_straggler_tick();
  void dump_stacks(const std::string& reason,
                   const std::function<void(std::vector<std::string>)>& then);
  int local_rank_of(pid_t pid) const;
  std::string status_json() const;
  HttpAnswer log_answer(std::string_view rank_text) const;  // GET /log/<rank>[/stdout]
  /// Once a second: this node's record for the others, and a steps sample of every rank.
  void schedule_view_tick();
  PublishedNode local_record() const;
  /// Each local rank's CPU time and resident set from /proc (rank_usage.hpp), on the view tick.
  void sample_usage();
  std::vector<RemoteNodeView> remote_views(Clock::time_point now) const;
  int node_rank() const;  // this node's in the round (the events' digest; 0 on a single node)
  std::string metrics_text() const;
  /// Both transports closed, the beacon and the socket directory we made removed.
  void close_status_endpoint();

  boost::asio::io_context& io_;
  HealthSettings settings_;
  Hooks hooks_;
  Phase phase_ = Phase::Starting;
  int attempt_ = 0;
  int nnodes_ = 1;
  std::string host_;
  std::vector<MonitoredWorker> workers_;
  std::vector<std::unique_ptr<HeartbeatSocket>> heartbeats_;
  std::unique_ptr<FileTimerServer> timer_server_;
  std::unique_ptr<StatusServer> status_server_;
  std::unique_ptr<StatusBeacon> beacon_;  // tells `ddprun top` where the endpoint is
  mutable bool viewed_ = false;           // /status or the page was asked for: someone watches
  bool lingering_ = false;                // finish() left the endpoint open for linger()
  std::unique_ptr<boost::asio::steady_timer> linger_timer_;
  std::unique_ptr<boost::asio::signal_set> linger_signals_;
  StackDumper stacks_;
  ProgressTracker tracker_;
  StragglerDetector stragglers_;
  NoProgressRestarts restarts_policy_;
  boost::asio::steady_timer hang_timer_;
  boost::asio::steady_timer straggler_timer_;
  boost::asio::steady_timer view_timer_;
  /// The other nodes' records as last read: each with when its text last changed (by this clock).
  struct ReceivedNode {
    NodeRecord raw;
    std::optional<PublishedNode> published;
    Clock::time_point received{};
  };
  std::vector<ReceivedNode> remote_;
  StepHistory steps_;    // every rank's step, sampled each second (/history, "steps_per_s")
  FailureLog failures_;  // how ranks failed, every attempt (/status "failures")
  UsageMeter usage_;     // each local rank's CPU% and RSS (/status, the view record)
  std::map<int, AttemptCause> causes_;  // attempt_cause()'s, the last 16 attempts (/status)
  int status_port_ = 0;
  std::string own_socket_dir_;       // made for the sockets (deep --log-dir); removed at the end
  bool stack_dump_started_ = false;  // one dump per attempt
  std::vector<std::string> attempt_stacks_;  // what it saved, for a later timer of the attempt
  /// Acting on a hang or a timer once the running dump is saved (queued, in order).
  std::vector<std::function<void(std::vector<std::string>)>> dump_waiters_;
  long long progress_events_ = 0;  // this attempt's progress events that counted (on_progress)

  // Counters for /metrics.
  long long hang_verdicts_ = 0;
  long long timer_expirations_ = 0;
  long long stragglers_found_ = 0;
  long long heartbeats_total_ = 0;
  std::map<std::string, long long> exits_by_cause_;
  std::vector<std::string> exits_;  // per local rank: how it ended ("" while running), for /status
  std::vector<bool> stopped_;       // per local rank: ddprun stopped it (no failure of its own)
};

}  // namespace ddp::launcher::health
