// SPDX-License-Identifier: MIT
// The Agent's side of the job's store and of the other nodes: hosting the store, joining each
// round, and turning the monitor's news (a stop elsewhere, a lost node) into supervision steps.
// Everything here runs on the Agent's loop; blocking store calls live in NodeSession's thread.
#include <fmt/format.h>
#include <signal.h>

#include "launcher/common/exit_codes.hpp"
#include "launcher/multinode/node_session.hpp"
#include "launcher/run/agent.hpp"
#include "launcher/run/agent_events.hpp"
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
  JobRendezvous::Events events;
  events.on_stop = [this](const StopReason& reason) { on_job_stop(reason); };
  events.on_lost = [this](const NodeLoss& loss) { on_node_lost(loss); };
  if (make_rendezvous_) {
    session_ = make_rendezvous_(io_, std::move(events));
    return Ok{};
  }
  rdzv::StoreClientOptions client;
  client.host = plan.connect_host;
  client.port = static_cast<std::uint16_t>(setup_.master_port);
  client.timeout = setup_.multinode->read_timeout;
  session_ = std::make_unique<NodeSession>(io_, *setup_.multinode, client, std::move(events));
  return Ok{};
}

void Agent::on_joined(int attempt, const JobRendezvous::JoinResult& result) {
  if (phase_ == Phase::Done) return;
  if (const auto* error = std::get_if<std::string>(&result)) {
    say(fmt::format("rendezvous failed: {}", *error));
    events_.emit("rendezvous_failed", {{"attempt", attempt}, {"error", *error}});
    end_with(rendezvous_failed(*error));
    finish_run();
    return;
  }
  if (interrupted_) {
    finish_run();
    return;
  }
  const auto& joined = std::get<rdzv::RendezvousResult>(result);
  layout_ = GroupLayout{joined.node_rank, joined.num_nodes, joined.base_rank, joined.world_size};
  events_.emit("rendezvous", rendezvous_fields(attempt, joined));
  launch_workers(attempt);
}

void Agent::on_local_failure(Worker& w) {
  root_cause_ = static_cast<size_t>(&w - workers_.data());
  const int node_rank = session_ && layout_ ? layout_->node_rank : -1;
  RunEnd cause = worker_failed(w.outcome, node_rank, setup_.host);
  const bool first = end_with(cause);
  // Multi-node: the first local failure is offered as the job-wide stop reason, unless the job
  // was already stopped from elsewhere (then the store holds a reason and this one would lose).
  if (first && session_ && layout_) session_->broadcast_stop(StopReason{cause.exit_code, node_rank, cause.text});
}

void Agent::on_job_stop(const StopReason& reason) {
  if (phase_ == Phase::Done || phase_ == Phase::Starting) return;  // Starting: a past round's news
  if (layout_ && is_own_stop(reason, layout_->node_rank)) return;
  // First reason wins in the store: adopt it even if this node failed at the same moment, so
  // every node names the same root cause and exits with the same code.
  end_with(job_stopped(reason));
  events_.emit("job_stop", {{"reason", reason.text}, {"exit_code", reason.exit_code}, {"node_rank", reason.node_rank}});
  if (phase_ == Phase::Running) {
    say(fmt::format("stopping the workers: the job failed on another node: {}", reason.text));
    stop_workers(SIGTERM);
  }
}

void Agent::on_node_lost(const NodeLoss& loss) {
  if (phase_ == Phase::Done || phase_ == Phase::Starting) return;
  // Once the job has a root cause, the store host going away is the expected end, not news.
  if (end_) return;
  end_with(node_lost(loss));
  nlohmann::json fields{{"message", loss.text}};
  if (loss.node_rank) fields["node_rank"] = *loss.node_rank;
  events_.emit("node_lost", fields);
  session_->cancel_waits();
  say(fmt::format("{}; stopping the job", loss.text));
  if (phase_ == Phase::Running) stop_workers(SIGTERM);
}

void Agent::on_barrier(const JobRendezvous::BarrierResult& result) {
  if (phase_ != Phase::Finishing) return;
  if (const auto* stop = std::get_if<StopReason>(&result)) {
    end_with(job_stopped(*stop));
    say(fmt::format("the job failed on another node: {}", stop->text));
  } else if (const auto* loss = std::get_if<NodeLoss>(&result)) {
    // The store is gone: exit 74, no restart.
    if (end_with(node_lost(*loss))) {
      events_.emit("node_lost", {{"message", loss->text}});
      say(loss->text);
    }
  }
  after_attempt();
}

}  // namespace ddp::launcher
