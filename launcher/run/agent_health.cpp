// SPDX-License-Identifier: MIT
// The Agent's side of health (docs/health.md): making the HealthMonitor and acting on what it
// found. The monitor decides when and saves the stacks; the Agent ends the attempt with a RunEnd
// of kind Hung (run_end.hpp) and stops the job as for a failure.
#include <fmt/format.h>
#include <signal.h>

#include "common/exit_codes.hpp"
#include "launcher/health/store_metrics.hpp"
#include "launcher/run/agent.hpp"

namespace ddp::launcher {

std::unique_ptr<health::HealthMonitor> Agent::make_health_monitor() {
  health::HealthMonitor::Hooks hooks;
  hooks.say = [this](const std::string& line) { say(line); };
  hooks.emit = [this](const char* event, nlohmann::json fields) {
    events_.emit(event, std::move(fields));
  };
  hooks.on_hung = [this](const health::HealthStop& stop) { on_hung(stop); };
  hooks.on_hang_verdict = [this](const std::string& text) { on_hang_verdict(text); };
  hooks.on_timer_expired = [this](pid_t pid, int sig, const health::HealthStop& stop) {
    on_timer_expired(pid, sig, stop);
  };
  if (session_) {  // multi-node: the verdict is job-wide; the other nodes learn of our progress
    hooks.on_progress = [this](long long events, std::optional<long long> best_step,
                               bool all_started) {
      if (session_) session_->note_progress(events, best_step, all_started);
    };
    hooks.publish_view = [this](std::string record) {
      if (session_) session_->note_view(std::move(record));
    };
  }
  hooks.extra_metrics = [this](health::PrometheusText& metrics) {
    // The job's store when this agent hosts it; a store thread too busy to answer within the budget
    // is left out of this scrape rather than holding the loop.
    if (!store_) return;
    if (auto stats = store_->stats(std::chrono::milliseconds(200))) {
      health::append_store_metrics(metrics, *stats);
    }
  };
  hooks.history = [this] { return &events_.recent(); };
  hooks.stderr_tail = [this](int local_rank, size_t lines) -> std::vector<std::string> {
    if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size()) return {};
    const auto& err = workers_[static_cast<size_t>(local_rank)].err;
    return err ? err->tail_lines(lines) : std::vector<std::string>{};
  };
  hooks.stdout_tail = [this](int local_rank, size_t lines) -> std::vector<std::string> {
    if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size()) return {};
    const auto& out = workers_[static_cast<size_t>(local_rank)].out;
    return out ? out->tail_lines(lines) : std::vector<std::string>{};
  };
  auto path = setup_.parent_env.find("PATH");
  const std::string path_variable =
      path == setup_.parent_env.end() ? "/usr/bin:/bin" : path->second;
  return std::make_unique<health::HealthMonitor>(io_, setup_.config.health, std::move(hooks),
                                                 path_variable);
}

void Agent::record_health_stop(const health::HealthStop& stop) {
  health_notes_.push_back(stop.text);
  health_notes_.insert(health_notes_.end(), stop.details.begin(), stop.details.end());
  // Before the directory is announced: should ddprun be killed after that, the orphan guard must
  // keep it too.
  control_->keep_scratch();
  if (!keep_run_dir_ && run_dir_->temporary()) {
    say(fmt::format("worker logs and stacks: {}", run_dir_->path()));
  }
  keep_run_dir_ = true;  // the stacks are the evidence
}

void Agent::on_hang_verdict(const std::string& text) {
  if (phase_ != Phase::Running) return;
  const int node_rank = session_ && layout_ ? layout_->node_rank : -1;
  const RunEnd cause = hung(text, node_rank, setup_.host);
  // The verdict is the attempt's end from now: a rank that fails while the stacks are saved
  // does not replace it (75, not its own code). Multi-node: offered as the job's stop (unless
  // another node's stop already stands); the other nodes save their stacks too, then stop with
  // the same exit code (75).
  if (end_with(cause) && session_ && layout_) {
    session_->broadcast_stop(StopReason{cause.exit_code, node_rank, cause.text, {}});
  }
}

void Agent::on_hung(const health::HealthStop& stop) {
  if (phase_ == Phase::Done) return;
  record_health_stop(stop);  // the stacks are the evidence, however the attempt went meanwhile
  // A stop that waited for these stacks (Ctrl-C, a failure) goes with its own signal.
  if (phase_ == Phase::Running && !stop_after_dump_) stop_workers(SIGTERM);
}

bool Agent::stop_for_hang_elsewhere(const StopReason& reason) {
  if (reason.exit_code != exit_codes::kHung || phase_ != Phase::Running) return false;
  say(fmt::format("the job is hung ({}); saving the stacks here before stopping", reason.text));
  health_->hung_elsewhere(reason.text, [this](const health::HealthStop& stop) {
    record_health_stop(stop);
    // A worker that failed meanwhile has already stopped the others.
    if (phase_ == Phase::Running) stop_workers(SIGTERM);
  });
  return true;
}

void Agent::on_timer_expired(pid_t pid, int sig, const health::HealthStop& stop) {
  record_health_stop(stop);
  // As torchrun's FileTimerServer: the pid that asked, with the signal it asked for. Its exit is
  // then the root cause like any failure. Only while this attempt's workers run: after that the
  // pid may be gone (and its number reused).
  if (phase_ != Phase::Running) return;
  control_->signal_process(pid, sig);
}

}  // namespace ddp::launcher
