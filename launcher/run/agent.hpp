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
/// (on NodeSession's thread; the result is posted back). A worker that succeeded everywhere on
/// this node leads to Finishing (the exit barrier: every node done, or a stop from elsewhere turns
/// it into a failure). A stop broadcast by another node or a lost node ends Running like a local
/// failure. The agent may host the job's store (HostedStore: its own thread and loop).

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
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
#include "launcher/multinode/multinode_settings.hpp"
#include "launcher/multinode/node_session.hpp"
#include "launcher/output/output_sink.hpp"
#include "launcher/output/stream_pump.hpp"
#include "launcher/process/process_control.hpp"
#include "launcher/run/event_log.hpp"
#include "launcher/run/failure_report.hpp"
#include "launcher/run/hosted_store.hpp"
#include "launcher/run/run_directory.hpp"

namespace ddp::launcher {

/// What the Agent needs besides the configuration, all resolved by main.
struct AgentSetup {
  LaunchConfig config;
  std::string executable;  // resolved path of argv[0]
  std::vector<std::string> argv;
  EnvMap parent_env;
  std::string host;
  int master_port = 0;     // as configured; 0: the store's kernel-chosen port (set in prepare)
  StorePlan store;         // where the job's store lives (this agent may host it)
  std::optional<MultiNodeSettings> multinode;  // set: meet the other nodes before each attempt
};

class Agent {
 public:
  /// `control` defaults to the real PosixProcessControl; tests pass a scripted fake.
  explicit Agent(AgentSetup setup, std::unique_ptr<ProcessControl> control = nullptr);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// The loop every handler runs on; other components (the store server) may share it.
  boost::asio::io_context& io_context() { return io_; }

  /// Runs the job to the end (all attempts). Returns ddprun's exit code.
  int run();

 private:
  // Finishing (multi-node): this node's workers succeeded; waiting for the other nodes.
  enum class Phase { Starting, Running, Stopping, Cleaning, Finishing, Done };

  struct Worker {
    WorkerOutcome outcome;
    pid_t pgid = -1;
    bool alive = false;
    std::shared_ptr<StreamPump> out;
    std::shared_ptr<StreamPump> err;
    int exec_report_fd = -1;  // between fork and the confirmed exec
  };

  Result<Ok> prepare();
  /// One "ddprun: ..." line on stderr, in order with the workers' stderr lines.
  void say(const std::string& line);
  /// Opens a log file for a worker stream; nullptr (and a message) when it cannot.
  std::shared_ptr<OutputSink> open_log(const std::string& path);
  /// A log or events file could not be written (disk full...): one line, an event, the summary.
  void on_log_error(const std::string& path, int error);
  /// Hosts the store when this agent is the one to (port in use: one line and exit 69).
  Result<Ok> open_store();
  void start_attempt(int attempt);
  void on_joined(int attempt, const NodeSession::JoinResult& result);
  void launch_workers(int attempt);
  /// Multi-node: the first local failure becomes the job-wide stop reason.
  void announce_failure(const Worker& worker);
  void on_job_stop(const StopReason& reason);
  void on_node_lost(const std::string& message);
  void after_attempt(bool failed);
  std::string root_cause_text() const;
  void start_worker(Worker& worker, int attempt);
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
  void clean_up_leftovers();
  void finish_attempt();
  void finish_run();
  int exit_code() const;
  Worker* find_worker(pid_t pid);
  /// Health (docs/health.md): the monitor saved the stacks; now stop as for a failure.
  void on_hung(const health::HealthStop& stop);
  void on_timer_expired(pid_t pid, int sig, const health::HealthStop& stop);
  /// Multi-node: another node judged the job hung; save the stacks here, then stop. False when
  /// `reason` is not a hang (or this node is not running workers).
  bool stop_for_hang_elsewhere(const StopReason& reason);
  std::unique_ptr<health::HealthMonitor> make_health_monitor();
  bool any_alive() const;

  AgentSetup setup_;
  boost::asio::io_context io_{1};
  boost::asio::signal_set child_signals_;
  boost::asio::signal_set shutdown_signals_;
  boost::asio::signal_set forwarded_signals_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::steady_timer cleanup_timer_;
  boost::asio::steady_timer recheck_timer_;  // Cleaning: leftovers that send no SIGCHLD
  OutputSink stdout_sink_;
  OutputSink stderr_sink_;
  std::unique_ptr<ProcessControl> control_;
  std::string token_;
  EventLog events_;
  std::optional<RunDirectory> run_dir_;
  bool keep_run_dir_ = false;

  Phase phase_ = Phase::Starting;
  int attempt_ = 0;
  std::vector<Worker> workers_;
  std::vector<AttemptOutcome> history_;
  std::optional<size_t> root_cause_;
  int shutdown_signal_ = 0;  // signal ddprun received (0: none)
  int leftover_rounds_ = 0;  // clean_up_leftovers() calls in this attempt's Cleaning phase
  long oom_kills_at_start_ = 0;
  int internal_error_ = 0;
  std::vector<std::string> log_errors_;  // "<path>: <error>", for the summary
  std::chrono::system_clock::time_point start_time_;

  // The store and the other nodes.
  std::unique_ptr<HostedStore> store_;
  std::unique_ptr<NodeSession> session_;
  std::optional<GroupLayout> layout_;       // this attempt's place in the job (multi-node)
  std::optional<StopReason> job_stop_;      // the job-wide root cause in force this attempt
  std::string own_stop_text_;               // what this node broadcast, if anything
  std::string lost_message_;                // a node or the store vanished
  int rendezvous_error_ = 0;

  std::unique_ptr<health::HealthMonitor> health_;
  int hung_attempt_ = -1;                 // the attempt judged hung (exit 75 if it is the last)
  std::vector<std::string> health_notes_;  // this attempt's hang / timer_expired, for the summary
};

}  // namespace ddp::launcher
