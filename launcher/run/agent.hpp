// SPDX-License-Identifier: MIT
#pragma once
/// Agent: owns one Asio io_context and supervises the local worker group on it.
///
/// Everything happens on that loop (single thread): SIGCHLD and the shutdown signals arrive as
/// signal_set events, worker pipes as readiness events, the shutdown grace as a steady_timer.
/// Nothing polls. The io_context is exposed so that a TCP store server can share the loop.
///
/// Phases of one attempt (only Agent's handlers assign phase_):
///
///    Running --first failure / shutdown signal--> Stopping --all workers reaped--> Cleaning
///       |                                            | grace expires: SIGKILL          |
///       +------------all workers reaped (success)----+------------------------------->+
///                                                                                     |
///    Cleaning: SIGKILL inherited orphans until none is left --> attempt ends --> Starting (a
///    failure with restarts left; the next attempt is posted) or Done (io_context stops).
///    Starting --posted start_attempt--> Running (or Done if a shutdown signal came meanwhile).
///
/// Multi-node (agent_nodes.cpp): Starting also covers the join of the attempt's rendezvous round
/// (through the JobRendezvous seam; NodeSession does it on its own thread and posts the result
/// back). A worker that succeeded everywhere on this node leads to Finishing (the exit barrier:
/// every node done, or a stop from elsewhere turns it into a failure). A stop broadcast by another
/// node or a lost node ends Running like a local failure. The agent may host the job's store
/// (HostedStore: its own thread and loop).
///
/// A local worker failure in a job that could survive a lost node is first held (not offered to
/// the job) for a bounded time, loss_verdict_wait(): real collectives fail as soon as a peer dies,
/// long before its heartbeats are missed. A loss reported meanwhile replaces the failure (a
/// re-form, a spare taking the lost node's place); a stop from another node is adopted; at the
/// deadline the failure is offered as usual. An attempt that ends while the failure is held waits
/// in Awaiting for that verdict instead of restarting.
///
/// Why the attempt ends is one value, end_ (a RunEnd): every handler offers its cause and the
/// rules in run_end.hpp decide which stands; the exit code, the restart decision and the summary
/// all read it. The Agent decides; pipes and log files (WorkerStreams), event fields
/// (agent_events) and the store's keys (NodeSession, rendezvous/) live elsewhere.

#include <sys/types.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"
#include "launcher/env/worker_env.hpp"
#include "launcher/health/health_monitor.hpp"
#include "launcher/multinode/hosted_store.hpp"
#include "launcher/multinode/job_rendezvous.hpp"
#include "launcher/multinode/join_progress.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "launcher/output/output_sink.hpp"
#include "launcher/output/stream_pump.hpp"
#include "launcher/process/process_control.hpp"
#include "launcher/run/agent_events.hpp"
#include "launcher/run/event_log.hpp"
#include "launcher/run/failure_report.hpp"
#include "launcher/run/membership.hpp"
#include "launcher/run/node_store_proxy.hpp"
#include "launcher/run/run_directory.hpp"
#include "launcher/run/run_end.hpp"

namespace ddp::launcher {

/// What the Agent needs besides the configuration, all resolved by main.
struct AgentSetup {
  LaunchConfig config;
  std::string executable;  // resolved path of argv[0]
  std::vector<std::string> argv;
  EnvMap parent_env;
  std::string host;
  int master_port = 0;  // as configured; 0: the store's kernel-chosen port (set in prepare)
  StorePlan store;      // where the job's store lives (this agent may host it)
  std::optional<MultiNodeSettings> multinode;  // set: meet the other nodes before each attempt
};

class Agent {
 public:
  /// `control` defaults to the real PosixProcessControl and `rendezvous` to a NodeSession (when
  /// the setup is multi-node); tests pass scripted fakes.
  explicit Agent(AgentSetup setup, std::unique_ptr<ProcessControl> control = nullptr,
                 JobRendezvousFactory rendezvous = nullptr);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// The loop every handler runs on; other components (the store server) may share it.
  boost::asio::io_context& io_context() { return io_; }

  /// Runs the job to the end (all attempts). Returns ddprun's exit code.
  int run();

 private:
  // Finishing (multi-node): this node's workers succeeded; waiting for the other nodes.
  // Awaiting (multi-node): the attempt ended with a held local failure; waiting for the verdict.
  enum class Phase { Starting, Running, Stopping, Cleaning, Finishing, Awaiting, Done };

  struct Worker {
    WorkerOutcome outcome;
    pid_t pgid = -1;
    bool alive = false;
    std::shared_ptr<StreamPump> out;
    std::shared_ptr<StreamPump> err;
    int exec_report_fd = -1;  // between fork and the confirmed exec
  };

  Result<Ok> prepare();
  /// --preload: starts the node's preloaded interpreter importing (or the one line and event
  /// saying why not); the first attempt starts once it has answered (await_preload()).
  void begin_preload();
  /// Waits on the loop (signals honoured) for its answer, at most --preload-timeout.
  void await_preload();
  /// Its answer arrived, or `give_up`: the `preload` event, or the line and `preload_disabled`;
  /// then the first attempt.
  void settle_preload(const std::optional<std::string>& give_up);
  void on_preload_disabled(const std::string& reason);
  /// One "ddprun: ..." line on stderr, in order with the workers' stderr lines.
  void say(const std::string& line);
  /// A log or events file could not be written (disk full...): one line, an event, the summary.
  void on_log_error(const std::string& path, int error);
  /// Hosts the store when this agent is the one to (port in use: one line and exit 69).
  Result<Ok> open_store();
  void start_attempt(int attempt);
  void on_joined(int attempt, const JobRendezvous::JoinResult& result);
  /// Single node, before attempt k > 0: the workers' keys of attempt k-1 leave the hosted store.
  void clear_last_attempts_keys();
  void launch_workers(int attempt);
  /// A worker of this node failed: the attempt's root cause here, and (multi-node) the job-wide
  /// stop reason offered to the other nodes.
  void on_local_failure(Worker& worker);
  void on_job_stop(const StopReason& reason);
  /// Holds this node's failure `stop` until a lost node or another node's stop explains it, or
  /// `wait` passes (then it is broadcast and the attempt goes on as for any failure).
  void hold_for_loss_verdict(const StopReason& stop, std::chrono::milliseconds wait);
  void await_loss_verdict(std::chrono::milliseconds wait);
  /// The held failure is settled by other news: no broadcast; an attempt waiting in Awaiting
  /// goes on (from the loop) with the end that news set. False when nothing was held.
  bool settle_held_failure();
  /// The wait is over, or ddprun is interrupted: the held failure is offered to the job.
  void release_held_failure();
  void on_node_lost(const NodeLoss& loss);
  /// The live pending nodes changed (every node hears it; the round's node 0 decides).
  void on_pending(const std::vector<rdzv::JoinRequest>& pending);
  /// Node 0 while its workers run: admit, keep as spares or refuse the pending nodes.
  void consider_arrivals();
  /// This node waits as a pending node or a spare (during its join).
  void on_waiting(const std::string& role);
  void on_barrier(const JobRendezvous::BarrierResult& result);
  /// The Agent's handlers for the rendezvous's news (stop, loss, pending nodes, progress).
  JobRendezvous::Events rendezvous_events();
  /// Offers a cause for the end of the attempt (see run_end.hpp); true when it stands.
  bool end_with(RunEnd cause);
  /// Elastic: a lost node of the current round that the job may survive; false when the loss
  /// ends the job (then `text` says why).
  bool try_rescale(int lost_node, std::string& text);
  /// The join of a round failed: the job lost a node or its store (74), or never met (69).
  void on_join_failed(int attempt, const JobRendezvous::JoinResult& result);
  /// What the round just joined changed in the job's membership (a re-form, a restart with
  /// fewer or more nodes), with the budgets counted; nothing when it is the same job.
  std::optional<RescaleRecord> membership_change(int attempt, const rdzv::RendezvousResult& joined);
  /// The attempt's workers are gone: what follows (run_end.hpp's next_step) is done here.
  void after_attempt();
  /// Ends the attempt with a restart of the workers (every node's, in a multi-node job).
  void begin_restart();
  /// Ends the attempt of a re-form: the next round joins the survivors only.
  void begin_reform();
  ElasticPolicy elastic_policy() const;
  void start_worker(Worker& worker, int attempt);
  // --store-proxy on etcd: the proxy in front of this round's workers' store (a new one per store).
  void follow_round_store(const rdzv::RendezvousResult& round);
  void confirm_exec(Worker& worker);
  void record_start_failure(Worker& worker, const Error& error);
  void wait_for_children();
  void wait_for_shutdown_signals();
  /// SIGUSR1/SIGUSR2 (Slurm's pre-timeout warning) go to every worker; the job keeps running.
  void wait_for_forwarded_signals();
  void on_children_exited();
  void on_worker_exit(Worker& worker, const ExitStatus& status);
  void on_shutdown_signal(int sig);
  void stop_workers(int sig);
  void kill_everything_now();
  void after_worker_exit();
  /// The cleanup's bound: leftovers still there `after` this are reported and left (a stack
  /// dump still running pushes it back; the dump's own limit bounds that).
  void arm_leftover_deadline(std::chrono::milliseconds after);
  void clean_up_leftovers();
  void look_for_leftovers_again(std::chrono::milliseconds after);
  /// ddprun's live children and the job cgroup's members, less the stack dumper's tools: once
  /// every worker is reaped, what the workers left running.
  std::vector<pid_t> leftovers();
  void finish_attempt();
  void finish_run();
  void end_loop();  // after the summary: the status endpoint lingers, then the loop stops
  /// TORCHELASTIC_ERROR_FILE set for ddprun: the root cause's error file copied there.
  void copy_root_cause_error_file();
  /// The attempt's end as decided (end_, root_cause_), for the views' failures (health/).
  void note_attempt_cause();
  int exit_code() const;
  Worker* find_worker(pid_t pid);
  bool any_alive() const;
  // Health (agent_health.cpp, docs/health.md).
  std::unique_ptr<health::HealthMonitor> make_health_monitor();
  /// The monitor judged the job hung and saved the stacks: a RunEnd of kind Hung, then stop as
  /// for a failure (multi-node: offered to the other nodes as the job's stop, exit 75).
  void on_hung(const health::HealthStop& stop);
  void on_hang_verdict(const std::string& text);
  void on_timer_expired(pid_t pid, int sig, const health::HealthStop& stop);
  /// Multi-node: another node judged the job hung (its stop stands as this attempt's end); save
  /// the stacks here, then stop. False when `reason` is not a hang or no worker runs here.
  bool stop_for_hang_elsewhere(const StopReason& reason);
  /// A hang verdict or an expired timer: its lines go to the summary; the stacks are evidence.
  void record_health_stop(const health::HealthStop& stop);

  AgentSetup setup_;
  boost::asio::io_context io_{1};
  boost::asio::signal_set child_signals_;
  boost::asio::signal_set shutdown_signals_;
  boost::asio::signal_set forwarded_signals_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::steady_timer cleanup_timer_;
  boost::asio::steady_timer recheck_timer_;  // Cleaning: leftovers that send no SIGCHLD
  boost::asio::steady_timer verdict_timer_;  // how long a local failure is held (see above)
  OutputSink stdout_sink_;
  OutputSink stderr_sink_;
  // Who arrived and who is missing while a join waits (stderr; one rewritten line on a tty).
  JoinProgress join_progress_{::isatty(STDERR_FILENO) != 0,
                              [this](const std::string& text) { stderr_sink_.write_all(text); }};
  std::unique_ptr<ProcessControl> control_;
  // --preload: the zygote's first answer, waited for on the loop (null once it came).
  std::unique_ptr<boost::asio::posix::stream_descriptor> preload_answer_;
  std::unique_ptr<boost::asio::steady_timer> preload_timer_;
  std::string token_;
  EventLog events_;
  std::optional<RunDirectory> run_dir_;
  bool keep_run_dir_ = false;

  Phase phase_ = Phase::Starting;
  int attempt_ = 0;
  std::vector<Worker> workers_;
  std::vector<AttemptOutcome> history_;
  std::optional<size_t> root_cause_;
  std::optional<RunEnd> end_;  // why this attempt ends; cleared only when a restart begins
  bool interrupted_ = false;   // a shutdown signal arrived: no new attempt; a second one kills now
  int leftover_rounds_ = 0;    // clean_up_leftovers() calls in this attempt's Cleaning phase
  int empty_looks_ = 0;        // looks in a row that found no leftover (Cleaning)
  long oom_kills_at_start_ = 0;
  std::vector<std::string> log_errors_;  // "<path>: <error>", for the summary
  std::chrono::system_clock::time_point start_time_;

  // The store and the other nodes.
  std::unique_ptr<HostedStore> store_;
  std::unique_ptr<NodeStoreProxy> proxy_;  // --store-proxy: the workers' store address
  JobRendezvousFactory make_rendezvous_;
  std::unique_ptr<JobRendezvous> session_;
  std::optional<GroupLayout> layout_;            // this attempt's place in the job (multi-node)
  std::optional<rdzv::RendezvousResult> round_;  // every node of this attempt's round
  RoundPlan next_round_;           // how to join the next round (pinned after a re-form)
  std::set<int> lost_nodes_;       // node ranks of this round known to be gone
  int restarts_used_ = 0;          // worker failures restarted (--max_restarts)
  int rescales_used_ = 0;          // membership changes (max_rescales)
  int own_failures_in_a_row_ = 0;  // earlier attempts in a row whose workers failed here
  bool failed_here_ = false;       // a worker of this attempt failed on this node
  bool reached_store_ = false;     // this node waited in the job's store (pending, spare)
  std::optional<NodeLoss> store_lost_in_join_;  // the store went away while this node joined
  bool quarantined_ = false;                // node_failure_limit reached: this node leaves the job
  std::vector<rdzv::JoinRequest> pending_;  // live pending nodes of this round, as last heard
  std::set<std::int64_t> told_spare_;       // pending numbers told they are spares
  struct RoundLeft {  // the round this node left for the next one, and when (its workers stopped)
    std::vector<rdzv::NodeAssignment> nodes;
    int world_size = 0;
    std::chrono::steady_clock::time_point since;
  };
  struct Reform {  // a re-form in progress, reported once the round formed
    std::string reason;
    size_t survivors = 0;
    size_t admitted = 0;
    RoundLeft left;
  };
  std::optional<Reform> reform_;
  std::optional<StopReason> held_failure_;  // this node's failure, not yet offered (see above)
  std::optional<int> stop_after_dump_;      // a stop (its signal) waiting for the stack dump
  int hold_renewals_ = 0;  // of the held failure's wait, after a stall of this agent
  std::optional<RoundLeft> restart_from_;  // the round a pending restart left (none: no restart)
  RoundLeft round_left() const;            // round_ (empty without one), left now
  std::vector<std::string> membership_changes_;  // for the summary

  std::unique_ptr<health::HealthMonitor> health_;
  std::vector<std::string> health_notes_;  // this attempt's hang / timer_expired, for the summary
};

}  // namespace ddp::launcher
