// SPDX-License-Identifier: MIT
// The Agent's side of the job's store and of the other nodes: hosting the store, joining each
// round, and turning the monitor's news (a stop elsewhere, a lost node) into supervision steps.
// Everything here runs on the Agent's loop; blocking store calls live in NodeSession's thread.
#include <fmt/format.h>
#include <signal.h>

#include "launcher/common/exit_codes.hpp"
#include "launcher/run/agent.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/token_auth.hpp"

namespace ddp::launcher {

Result<Ok> Agent::open_store() {
  const StorePlan& plan = setup_.store;
  if (plan.role != StoreRole::Client) {
    rdzv::StoreServerOptions options;
    options.bind_address = plan.bind_address;
    options.port = static_cast<std::uint16_t>(plan.port);
    if (setup_.multinode && !setup_.multinode->token.empty()) {
      options.access_policy = std::make_shared<rdzv::TokenAccessPolicy>(setup_.multinode->token);
    }
    try {
      store_ = std::make_unique<HostedStore>(options);
      setup_.master_port = store_->port();
    } catch (const rdzv::StoreBindError& e) {
      if (plan.role == StoreRole::Host) {
        return Error{multinode_exit_codes::kRendezvous,
                     fmt::format("{} (another job or torchrun may be using port {}: pass a free "
                                 "--master_port, or --standalone to let the system pick one)",
                                 e.what(), plan.port)};
      }
      // TryHost: the endpoint belongs to another node, or its agent already serves it.
    }
  }
  if (!setup_.multinode) return Ok{};
  if (setup_.master_port == 0) {
    return Error{exit_codes::kUsage, "--master_port 0 only works on the node that hosts the store; "
                                     "give the other nodes the port it chose"};
  }
  rdzv::StoreClientOptions client;
  client.host = plan.connect_host;
  client.port = static_cast<std::uint16_t>(setup_.master_port);
  client.timeout = setup_.multinode->read_timeout;
  NodeSession::Events events;
  events.on_stop = [this](const StopReason& reason) { on_job_stop(reason); };
  events.on_lost = [this](const std::string& message) { on_node_lost(message); };
  session_ = std::make_unique<NodeSession>(io_, *setup_.multinode, client, std::move(events));
  return Ok{};
}

void Agent::on_joined(int attempt, const NodeSession::JoinResult& result) {
  if (phase_ == Phase::Done) return;
  if (const auto* error = std::get_if<std::string>(&result)) {
    say(fmt::format("rendezvous failed: {}", *error));
    events_.emit("rendezvous_failed", {{"attempt", attempt}, {"error", *error}});
    rendezvous_error_ = multinode_exit_codes::kRendezvous;
    finish_run();
    return;
  }
  if (shutdown_signal_ != 0) {
    finish_run();
    return;
  }
  const auto& joined = std::get<rdzv::RendezvousResult>(result);
  layout_ = GroupLayout{joined.node_rank, joined.num_nodes, joined.base_rank, joined.world_size};
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : joined.assignment.nodes) {
    nodes.push_back({{"node_rank", n.node_rank}, {"name", n.name},
                     {"local_world_size", n.local_world_size}, {"base_rank", n.base_rank}});
  }
  events_.emit("rendezvous", {{"attempt", attempt}, {"node_rank", joined.node_rank},
                              {"num_nodes", joined.num_nodes}, {"world_size", joined.world_size},
                              {"base_rank", joined.base_rank}, {"nodes", nodes}});
  launch_workers(attempt);
}

std::string Agent::root_cause_text() const {
  if (job_stop_) return job_stop_->text;
  if (root_cause_) {
    const auto& w = workers_[*root_cause_];
    return fmt::format("rank {} failed with {}", w.outcome.rank,
                       w.outcome.status ? describe(*w.outcome.status) : std::string("no status"));
  }
  return lost_message_.empty() ? std::string("the job was stopped") : lost_message_;
}

void Agent::announce_failure(const Worker& w) {
  if (!session_ || !layout_ || job_stop_) return;
  const ExitStatus status = w.outcome.status.value_or(ExitStatus::exited(1));
  StopReason reason{shell_exit_code(status),
                    fmt::format("node {} ({}): rank {} (pid {}) failed with {}", layout_->node_rank,
                                setup_.host, w.outcome.rank, w.outcome.pid, describe(status))};
  own_stop_text_ = reason.text;
  job_stop_ = reason;
  session_->broadcast_stop(reason);
}

void Agent::on_job_stop(const StopReason& reason) {
  if (phase_ == Phase::Done || phase_ == Phase::Starting) return;  // Starting: a past round's news
  if (reason.text == own_stop_text_) return;
  // First reason wins in the store: adopt it even if this node failed at the same moment, so
  // every node names the same root cause and exits with the same code.
  job_stop_ = reason;
  events_.emit("job_stop", {{"reason", reason.text}, {"exit_code", reason.exit_code}});
  if (stop_for_hang_elsewhere(reason)) return;  // stacks first (docs/health.md)
  if (phase_ == Phase::Running) {
    say(fmt::format("stopping the workers: the job failed on another node: {}", reason.text));
    stop_workers(SIGTERM);
  }
}

void Agent::on_node_lost(const std::string& message) {
  if (phase_ == Phase::Done || phase_ == Phase::Starting || !lost_message_.empty()) return;
  // Once the job has a root cause, the store host going away is the expected end, not news.
  if (job_stop_) return;
  lost_message_ = message;
  events_.emit("node_lost", {{"message", message}});
  session_->cancel_waits();
  say(fmt::format("{}; stopping the job", message));
  if (phase_ == Phase::Running) stop_workers(SIGTERM);
}

}  // namespace ddp::launcher
