// SPDX-License-Identifier: MIT
// The Agent's side of health (docs/health.md): making the HealthMonitor and acting on what it
// found. The monitor decides when and saves the stacks; the Agent stops the job as for a failure.
#include <fmt/format.h>
#include <signal.h>

#include "launcher/common/exit_codes.hpp"
#include "launcher/run/agent.hpp"

namespace ddp::launcher {

std::unique_ptr<health::HealthMonitor> Agent::make_health_monitor() {
  health::HealthMonitor::Hooks hooks;
  hooks.say = [this](const std::string& line) { say(line); };
  hooks.emit = [this](const char* event, nlohmann::json fields) { events_.emit(event, std::move(fields)); };
  hooks.on_hung = [this](const health::HealthStop& stop) { on_hung(stop); };
  hooks.on_timer_expired = [this](pid_t pid, int sig, const health::HealthStop& stop) {
    on_timer_expired(pid, sig, stop);
  };
  auto path = setup_.parent_env.find("PATH");
  return std::make_unique<health::HealthMonitor>(io_, setup_.config.health, std::move(hooks),
                                                 path == setup_.parent_env.end() ? "/usr/bin:/bin" : path->second);
}

void Agent::on_hung(const health::HealthStop& stop) {
  if (phase_ != Phase::Running) return;
  hung_attempt_ = attempt_;
  health_notes_.push_back(stop.text);
  health_notes_.insert(health_notes_.end(), stop.details.begin(), stop.details.end());
  keep_run_dir_ = true;  // the stacks are the evidence
  if (run_dir_->temporary()) say(fmt::format("worker logs and stacks: {}", run_dir_->path()));
  if (session_ && layout_ && !job_stop_) {
    // The other nodes save their stacks too, then stop with the same exit code (75).
    StopReason reason{exit_codes::kHung,
                      fmt::format("node {} ({}): {}", layout_->node_rank, setup_.host, stop.text)};
    own_stop_text_ = reason.text;
    job_stop_ = reason;
    session_->broadcast_stop(reason);
  }
  stop_workers(SIGTERM);
}

bool Agent::stop_for_hang_elsewhere(const StopReason& reason) {
  if (reason.exit_code != exit_codes::kHung || phase_ != Phase::Running) return false;
  say(fmt::format("the job is hung ({}); saving the stacks here before stopping", reason.text));
  health_->hung_elsewhere(reason.text, [this](const health::HealthStop& stop) {
    health_notes_.push_back(stop.text);
    health_notes_.insert(health_notes_.end(), stop.details.begin(), stop.details.end());
    keep_run_dir_ = true;
    if (run_dir_->temporary()) say(fmt::format("worker logs and stacks: {}", run_dir_->path()));
    if (phase_ == Phase::Running) stop_workers(SIGTERM);
  });
  return true;
}

void Agent::on_timer_expired(pid_t pid, int sig, const health::HealthStop& stop) {
  health_notes_.push_back(stop.text);
  health_notes_.insert(health_notes_.end(), stop.details.begin(), stop.details.end());
  keep_run_dir_ = true;
  // As torchrun's FileTimerServer: the pid that asked, with the signal it asked for. Its exit is
  // then the root cause like any failure. Only while this attempt's workers run: after that the
  // pid may be gone (and its number reused).
  if (phase_ != Phase::Running) return;
  control_->signal_process(pid, sig);
}

}  // namespace ddp::launcher
