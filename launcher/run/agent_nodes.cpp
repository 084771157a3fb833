// SPDX-License-Identifier: MIT
// The Agent's side of the job's store and of the other nodes: hosting the store, joining each
// round, and turning the monitor's news (a stop elsewhere, a lost node) into supervision steps.
// Everything here runs on the Agent's loop; blocking store calls live in NodeSession's thread.
#include <fmt/format.h>
#include <boost/asio/post.hpp>

#include <signal.h>
#include <algorithm>

#include "common/exit_codes.hpp"
#include "launcher/multinode/etcd_session.hpp"
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
        return Error{exit_codes::kUnavailable,
                     fmt::format("{} (another job or torchrun may be using port {}: pass a free "
                                 "--master_port, or --standalone to let the system pick one)",
                                 e.what(), plan.port)};
      }
      // TryHost: the endpoint belongs to another node, or its agent already serves it.
    }
  }
  // On etcd the workers' store moves with each round's node 0: the proxy is made per round, in
  // front of that round's store (Agent::start_worker).
  const bool on_etcd = setup_.multinode && setup_.multinode->etcd.on;
  if (setup_.config.store_proxy && setup_.config.use_agent_store && setup_.master_port != 0 &&
      !on_etcd) {
    try {
      proxy_ = std::make_unique<NodeStoreProxy>(plan.connect_host,
                                                static_cast<std::uint16_t>(setup_.master_port),
                                                setup_.config.store_proxy_max_watched_keys);
    } catch (const std::runtime_error& e) {
      return Error{exit_codes::kUnavailable, fmt::format("--store-proxy: {}", e.what())};
    }
  }
  if (!setup_.multinode) return Ok{};
  if (setup_.multinode->etcd.on && !make_rendezvous_) {
    // The job's state is in etcd; the workers' store is per attempt (node 0 of each round).
    session_ = std::make_unique<EtcdSession>(io_, *setup_.multinode, rendezvous_events());
    return Ok{};
  }
  if (setup_.master_port == 0) {
    return Error{exit_codes::kUsage,
                 "--master_port 0 only works on the node that hosts the store; "
                 "give the other nodes the port it chose"};
  }
  if (make_rendezvous_) {
    session_ = make_rendezvous_(io_, rendezvous_events());
    return Ok{};
  }
  rdzv::StoreClientOptions client;
  client.host = plan.connect_host;
  client.port = static_cast<std::uint16_t>(setup_.master_port);
  client.timeout = setup_.multinode->read_timeout;
  session_ = std::make_unique<NodeSession>(io_, *setup_.multinode, client, rendezvous_events());
  return Ok{};
}

JobRendezvous::Events Agent::rendezvous_events() {
  JobRendezvous::Events events;
  events.on_stop = [this](const StopReason& reason) { on_job_stop(reason); };
  events.on_lost = [this](const NodeLoss& loss) { on_node_lost(loss); };
  events.on_pending = [this](const std::vector<rdzv::JoinRequest>& p) { on_pending(p); };
  events.on_waiting = [this](const std::string& role) { on_waiting(role); };
  events.on_warning = [this](const std::string& text) { say("warning: " + text); };
  events.on_join_progress = [this](std::chrono::milliseconds waited, const std::string& status) {
    join_progress_.show(waited, status);
  };
  events.on_progress_elsewhere = [this](std::optional<long long> best_step, bool others_started) {
    // The job-wide hang verdict.
    if (health_) health_->progress_elsewhere(best_step, others_started);
  };
  if (setup_.config.health.status_port) {  // someone may look: the other nodes' ranks too
    events.on_node_views = [this](const std::vector<rdzv::NodeView>& others) {
      if (!health_) return;
      std::vector<health::HealthMonitor::NodeRecord> records;
      records.reserve(others.size());
      for (const auto& o : others) records.push_back({o.node_rank, o.name, o.record, o.lost});
      health_->node_records(records);
    };
  }
  events.on_note = [this](const std::string& line) { say(line); };
  return events;
}

void Agent::on_joined(int attempt, const JobRendezvous::JoinResult& result) {
  join_progress_.done();
  if (phase_ == Phase::Done) return;
  if (!std::holds_alternative<rdzv::RendezvousResult>(result)) {
    on_join_failed(attempt, result);
    return;
  }
  if (interrupted_) {
    finish_run();
    return;
  }
  const auto& joined = std::get<rdzv::RendezvousResult>(result);
  // A pending node joins the round it was invited to: the job's restart count.
  attempt = joined.round;
  // The job's budgets, as the nodes that were there before published them: a node that joins
  // later (or rejoins fast after a crash) cannot start them afresh (membership.hpp).
  const Budgets budgets = budgets_after_join({restarts_used_, rescales_used_, false}, joined);
  restarts_used_ = budgets.restarts_used;
  rescales_used_ = budgets.rescales_used;
  // Nor is the restart whose round went on without this pending node its own to count again.
  if (budgets.published) restart_from_.reset();
  layout_ = GroupLayout{joined.node_rank, joined.num_nodes, joined.base_rank, joined.world_size};
  round_ = joined;
  lost_nodes_.clear();
  events_.emit("rendezvous", rendezvous_fields(attempt, joined));
  if (const auto change = membership_change(attempt, joined)) {
    events_.emit("rescale", rescale_fields(*change));
    const std::string text = rescale_text(*change);
    membership_changes_.push_back(text);
    say(fmt::format("re-formed: {}", text));
  }
  launch_workers(attempt);
  consider_arrivals();  // pending nodes heard while this round formed
}

void Agent::on_join_failed(int attempt, const JobRendezvous::JoinResult& result) {
  if (const auto* loss = std::get_if<NodeLoss>(&result)) {
    // Nodes of the round left vanished before they rejoined: the job lost them (74). Or this
    // node was dropped: its line as the monitor would have said it (74).
    events_.emit("rendezvous_failed", {{"attempt", attempt}, {"error", loss->text}});
    const std::string text = loss->dropped ? loss->text
                             : reform_ ? fmt::format("could not re-form the job after \"{}\": {}",
                                                     reform_->reason, loss->text)
                                       : fmt::format("could not restart the job: {}", loss->text);
    say(text);
    end_with(node_lost(NodeLoss{text, std::nullopt}));
    finish_run();
    return;
  }
  if (const auto* error = std::get_if<std::string>(&result)) {
    events_.emit("rendezvous_failed", {{"attempt", attempt}, {"error", *error}});
    if (reform_) {
      // The survivors could not meet again (another one vanished, or the store did).
      const std::string text =
          fmt::format("could not re-form the job after \"{}\": {}", reform_->reason, *error);
      say(text);
      end_with(node_lost(NodeLoss{text, std::nullopt}));
    } else if (store_lost_in_join_ && (reached_store_ || round_)) {
      // A node that was in the job, or waited in it as pending or spare, and then lost the
      // store, lost the job's store like the running nodes did (74). Only a store never reached
      // is a rendezvous failure (69: nothing listens there).
      say(store_lost_in_join_->text);
      end_with(node_lost(*store_lost_in_join_));
    } else {
      say(fmt::format("rendezvous failed: {}", *error));
      end_with(rendezvous_failed(*error));
    }
    finish_run();
  }
}

std::optional<RescaleRecord> Agent::membership_change(int attempt,
                                                      const rdzv::RendezvousResult& joined) {
  // Both re-form paths report one shape (agent_events.hpp): the round left, the round formed.
  auto record = [&](std::string reason, std::string change, const RoundLeft& left) {
    return RescaleRecord{
        attempt,
        std::move(reason),
        std::move(change),
        left.nodes,
        left.world_size,
        joined.assignment.nodes,
        joined.world_size,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - left.since).count()};
  };
  std::optional<RescaleRecord> change;
  if (!reform_ && restart_from_) {
    switch (restart_change(static_cast<int>(restart_from_->nodes.size()), joined.num_nodes,
                           elastic_policy().elastic)) {
      case RestartChange::Loss:  // given back: a membership change, not a worker failure
        --restarts_used_;
        ++rescales_used_;
        change = record("restart without the missing nodes", "loss", *restart_from_);
        break;
      case RestartChange::Admit:
        ++rescales_used_;
        change = record("the restart admitted pending nodes", "admit", *restart_from_);
        break;
      case RestartChange::None:
        break;
    }
  }
  restart_from_.reset();
  if (reform_) {
    change = record(reform_->reason,
                    change_kind(reform_->left.nodes.size(), reform_->survivors, reform_->admitted),
                    reform_->left);
    reform_.reset();
    next_round_.join_timeout =
        std::chrono::milliseconds(0);  // later restarts: the same nodes, as configured
    next_round_.previous_round = -1;   // nor survivors of this round to watch
    next_round_.survivors_previous_ranks.clear();
  }
  return change;
}

void Agent::on_local_failure(Worker& w) {
  root_cause_ = static_cast<size_t>(&w - workers_.data());
  const int node_rank = session_ && layout_ ? layout_->node_rank : -1;
  RunEnd cause = worker_failed(w.outcome, node_rank, setup_.host);
  const bool first = end_with(cause);
  failed_here_ = true;
  if (first && session_ && layout_ && round_) {
    const LossDecision q = decide_quarantine(elastic_policy(), round_->assignment.nodes, node_rank,
                                             own_failures_in_a_row_ + 1,
                                             setup_.multinode->node_failure_limit, rescales_used_);
    if (q.rescale) {
      // The others re-form without this node (as for a loss); it leaves with its workers' code.
      quarantined_ = true;
      events_.emit("excluded", {{"node_rank", node_rank},
                                {"host", setup_.host},
                                {"reason", "node_failure_limit"},
                                {"message", q.text}});
      say(fmt::format("{}; this node leaves the job", q.text));
      session_->broadcast_stop(StopReason{cause.exit_code, node_rank, q.text, q.survivors});
      return;
    }
  }
  // Multi-node: the first local failure is offered as the job-wide stop reason, unless the job
  // was already stopped from elsewhere (then the store holds a reason and this one would lose).
  if (!first || !session_ || !layout_) return;
  const StopReason stop{cause.exit_code, node_rank, cause.text, {}};
  // A worker that could not start failed on its own; one that ran may have lost a peer.
  const auto wait = round_ && w.outcome.start_error.empty()
                        ? loss_verdict_wait(elastic_policy(), round_->assignment.nodes.size(),
                                            setup_.multinode->heartbeat_timeout,
                                            setup_.multinode->heartbeat_interval)
                        : std::chrono::milliseconds(0);
  if (wait.count() > 0) {
    hold_for_loss_verdict(stop, wait);
  } else {
    session_->broadcast_stop(stop);
  }
}

void Agent::hold_for_loss_verdict(const StopReason& stop, std::chrono::milliseconds wait) {
  held_failure_ = stop;
  say(fmt::format(
      "{}; waiting up to {:.3g} s for the other nodes' heartbeats before restarting (a lost "
      "node makes the collectives fail first)",
      stop.text, wait.count() / 1000.0));
  hold_renewals_ = 0;
  await_loss_verdict(wait);
}

void Agent::await_loss_verdict(std::chrono::milliseconds wait) {
  const auto due = std::chrono::steady_clock::now() + wait;
  verdict_timer_.expires_at(due);
  verdict_timer_.async_wait([this, due, wait](const boost::system::error_code& ec) {
    if (ec) return;
    const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - due);
    if (held_failure_ &&
        renew_loss_verdict_hold(late, setup_.multinode->heartbeat_interval, hold_renewals_)) {
      ++hold_renewals_;
      say(
          fmt::format("this agent stood still for {:.3g} s while its failure was held; waiting "
                      "{:.3g} s more for the other nodes' heartbeats",
                      late.count() / 1000.0, wait.count() / 1000.0));
      await_loss_verdict(wait);
      return;
    }
    release_held_failure();
  });
}

bool Agent::settle_held_failure() {
  if (!held_failure_) return false;
  held_failure_.reset();
  verdict_timer_.cancel();
  if (phase_ == Phase::Awaiting) {
    boost::asio::post(io_, [this] {
      if (phase_ == Phase::Awaiting && !held_failure_) after_attempt();
    });
  }
  return true;
}

void Agent::release_held_failure() {
  if (!held_failure_) return;
  const StopReason stop = *held_failure_;
  verdict_timer_.cancel();
  events_.emit("loss_verdict", {{"lost", false}, {"failure", stop.text}});
  // The failure stays held until the store says which reason won: another node's failure held as
  // long may have been offered a moment earlier, and ending on this one would leave the nodes
  // naming different root causes (chaos seed 14, fault 103).
  session_->settle_stop(stop, [this](const StopReason& winner) {
    if (!held_failure_) return;  // settled meanwhile: a stop or a loss reached this node first
    if (layout_ && !is_own_stop(winner, layout_->node_rank)) on_job_stop(winner);  // adopts it
    settle_held_failure();  // (a no-op when on_job_stop settled it): the attempt ends either way
  });
}

void Agent::on_job_stop(const StopReason& reason) {
  if (phase_ == Phase::Done || phase_ == Phase::Starting) return;  // Starting: a past round's news
  if (layout_ && is_own_stop(reason, layout_->node_rank)) return;
  // A failure held for the loss verdict would lose to this reason in the store anyway.
  settle_held_failure();
  // First reason wins in the store: adopt it even if this node failed at the same moment, so
  // every node names the same root cause and exits with the same code.
  end_with(job_stopped(reason));
  if (!reason.survivors.empty()) {
    session_->cancel_waits();  // Finishing: this node re-forms with the others
    if (phase_ == Phase::Running) {
      say(fmt::format("{}; stopping the workers", reason.text));
      stop_workers(SIGTERM);
    }
    return;
  }
  events_.emit(
      "job_stop",
      {{"reason", reason.text}, {"exit_code", reason.exit_code}, {"node_rank", reason.node_rank}});
  if (stop_for_hang_elsewhere(reason)) return;  // the stacks first (docs/health.md)
  if (phase_ == Phase::Running) {
    say(fmt::format("stopping the workers: the job failed on another node: {}", reason.text));
    stop_workers(SIGTERM);
  }
}

void Agent::on_node_lost(const NodeLoss& loss) {
  if (phase_ == Phase::Starting && !loss.node_rank) {
    // The store went away during the join; the join fails next and decides what that means.
    store_lost_in_join_ = loss;
    return;
  }
  if (phase_ == Phase::Done || phase_ == Phase::Starting) return;
  if (const std::optional<StopReason> held = held_failure_; held && settle_held_failure()) {
    // The local failure this loss explains was held for it: the loss is the attempt's end (a
    // re-form, a spare in the lost node's place), not a failure of this node's workers.
    events_.emit("loss_verdict", {{"lost", true}, {"failure", held->text}, {"loss", loss.text}});
    end_.reset();
    failed_here_ = false;
  }
  // Once the job has a root cause, the store host going away is the expected end, not news.
  // During a re-form, a lost store ends it (nothing can re-form without it) and another lost
  // node shrinks it further.
  if (end_ && end_->kind != RunEndKind::Rescale) return;
  nlohmann::json fields{{"message", loss.text}};
  if (loss.node_rank) fields["node_rank"] = *loss.node_rank;
  events_.emit("node_lost", fields);
  std::string text = loss.text;
  if (loss.node_rank && try_rescale(*loss.node_rank, text)) return;
  if (!end_with(node_lost(NodeLoss{text, loss.node_rank, loss.dropped}))) return;
  session_->cancel_waits();
  // A dropped node's line is the whole story, word for word as when its join meets it.
  say(loss.dropped ? text : fmt::format("{}; stopping the job", text));
  if (phase_ == Phase::Running) stop_workers(SIGTERM);
}

Agent::RoundLeft Agent::round_left() const {
  RoundLeft left;
  if (round_) {
    left.nodes = round_->assignment.nodes;
    left.world_size = round_->world_size;
  }
  left.since = std::chrono::steady_clock::now();
  return left;
}

ElasticPolicy Agent::elastic_policy() const {
  const auto& m = *setup_.multinode;
  ElasticPolicy p{m.dynamic && m.min_nodes < m.max_nodes, m.min_nodes, m.max_rescales};
  p.max_nodes = m.max_nodes;
  p.takes_pending = m.dynamic || m.spares;
  p.admit_at_once = m.admit_at_once;
  p.excluded_hosts = m.excluded_hosts;
  p.settings = m.must_agree;
  p.node_name = m.node_name;
  return p;
}

void Agent::on_pending(const std::vector<rdzv::JoinRequest>& pending) {
  if (phase_ == Phase::Done) return;
  pending_ = pending;
  consider_arrivals();
}

void Agent::consider_arrivals() {
  if (!session_ || phase_ != Phase::Running || end_ || !round_ || !layout_ ||
      layout_->node_rank != 0 || pending_.empty()) {
    return;
  }
  const ElasticPolicy policy = elastic_policy();
  const ArrivalDecision d =
      decide_arrivals(policy, round_->assignment.nodes, pending_, told_spare_, rescales_used_);
  for (const auto& answer : d.answers) {
    const auto it = std::find_if(pending_.begin(), pending_.end(),
                                 [&](const auto& p) { return p.seq == answer.seq; });
    const std::string who =
        it == pending_.end() ? std::to_string(answer.seq) : describe_pending(*it);
    if (answer.kind == PendingAnswer::Kind::Spare) {
      told_spare_.insert(answer.seq);
      events_.emit("spare", {{"pending", answer.seq}, {"node", who}});
      say(fmt::format("the job is full: {} waits as a spare", who));
    } else {
      const bool excluded =
          it != pending_.end() && rdzv::exclusion(policy.excluded_hosts, it->name);
      events_.emit(excluded ? "excluded" : "pending_refused",
                   {{"pending", answer.seq},
                    {"host", it == pending_.end() ? "" : it->name},
                    {"reason", excluded ? "exclude_hosts" : "refused"},
                    {"message", answer.reason}});
      say(fmt::format("refused {}: {}", who, answer.reason));
    }
    session_->answer_pending(answer);
  }
  std::erase_if(pending_, [&](const auto& p) {
    return std::any_of(d.answers.begin(), d.answers.end(), [&](const auto& a) {
      return a.seq == p.seq && a.kind == PendingAnswer::Kind::Refused;
    });
  });
  if (d.admitted.empty()) return;
  RunEnd cause = rescale(d.text, d.survivors, layout_->node_rank, d.admitted);
  if (!end_with(cause)) return;
  session_->broadcast_stop(
      StopReason{cause.exit_code, layout_->node_rank, d.text, d.survivors, d.admitted});
  session_->cancel_waits();
  say(fmt::format("{}; stopping the workers", d.text));
  stop_workers(SIGTERM);
}

void Agent::on_waiting(const std::string& role) {
  if (phase_ == Phase::Done) return;
  reached_store_ = true;
  events_.emit(role == "spare" ? "spare" : "pending", {{"host", setup_.multinode->node_name}});
  say(role == "spare"
          ? "the job is full: this node waits as a spare (it takes the place of the next lost node)"
          : "the job runs without this node: it waits as a pending node until the running nodes "
            "admit it");
}

bool Agent::try_rescale(int lost_node, std::string& text) {
  const ElasticPolicy policy = elastic_policy();
  if (!round_ || !layout_ || !(policy.elastic || policy.takes_pending))
    return false;  // static: the loss ends the job
  lost_nodes_.insert(lost_node);
  if (end_ && end_->kind == RunEndKind::Rescale) {
    // Already re-forming: whoever that re-form left out is gone too, whether or not this node's
    // own monitor noticed, so that every survivor expects the same nodes.
    for (const auto& n : round_->assignment.nodes) {
      if (std::find(end_->survivors.begin(), end_->survivors.end(), n.node_rank) ==
          end_->survivors.end()) {
        lost_nodes_.insert(n.node_rank);
      }
    }
  }
  // Rescales already decided in this round count as one change, not one per lost node. Spares
  // fill the places only in the first decision: the invitations of a re-form under way name
  // their node ranks, which a shrink would change (a shrinking re-form drops its newcomers, whom
  // the new round then refuses).
  const bool reforming = end_ && end_->kind == RunEndKind::Rescale;
  LossDecision d = decide_loss(policy, round_->assignment.nodes, lost_nodes_, rescales_used_,
                               reforming ? std::vector<rdzv::JoinRequest>{} : pending_);
  if (!d.rescale) {
    // A job that cannot shrink (static, MIN == MAX) keeps the loss's own words.
    if (policy.elastic || reforming) text = d.text;
    if (end_) end_.reset();  // the re-form under way cannot happen: the loss ends the job instead
    return false;
  }
  if (end_ && end_->kind == RunEndKind::Rescale) {
    // Already re-forming without the lost node (a quarantined node leaving, a node two monitors
    // reported): nothing changes, and the re-form keeps its own reason.
    if (d.survivors == end_->survivors && d.admitted.empty() && end_->admitted.empty()) return true;
    // Already re-forming: the survivors shrink. Every survivor sees the same loss on its own.
    end_->survivors = d.survivors;
    end_->admitted.clear();
    end_->text = d.text;
    say(d.text);
    return true;
  }
  RunEnd cause = rescale(d.text, d.survivors, layout_->node_rank, d.admitted);
  if (!end_with(cause)) return true;
  // Every node acts on the store's first reason; this one wins unless another got there first.
  session_->broadcast_stop(
      StopReason{cause.exit_code, layout_->node_rank, d.text, d.survivors, d.admitted});
  session_->cancel_waits();
  say(phase_ == Phase::Running ? fmt::format("{}; stopping the workers", d.text) : d.text);
  if (phase_ == Phase::Running) stop_workers(SIGTERM);
  return true;
}

void Agent::begin_reform() {
  const RunEnd cause = *end_;
  auto plan = reform_plan(cause.survivors, layout_ ? layout_->node_rank : -1);
  if (!plan) {
    // The others re-form without this node (they lost its heartbeats): it cannot rejoin.
    end_.reset();
    end_with(node_lost(
        NodeLoss{fmt::format("this node was dropped from the job: {}", cause.text), std::nullopt}));
    say(end_->text);
    finish_run();
    return;
  }
  plan->nodes += static_cast<int>(cause.admitted.size());  // the newcomers after the survivors
  ++rescales_used_;
  reform_ = Reform{cause.text, cause.survivors.size(), cause.admitted.size(), round_left()};
  // The survivors all leave their workers within the stop grace; one that vanished meanwhile
  // must not hold the others for the whole configured join timeout.
  const auto& m = *setup_.multinode;
  plan->join_timeout = std::min<std::chrono::milliseconds>(
      m.join_timeout,
      setup_.config.shutdown_timeout + 2 * m.heartbeat_timeout + std::chrono::seconds(5));
  if (round_) {
    plan->previous_round = round_->round;
    plan->survivors_previous_ranks = cause.survivors;
  }
  next_round_ = *plan;
  end_.reset();
  phase_ = Phase::Starting;
  boost::asio::post(io_, [this, next = attempt_ + 1] { start_attempt(next); });
}

void Agent::on_barrier(const JobRendezvous::BarrierResult& result) {
  if (phase_ != Phase::Finishing) return;
  if (const auto* stop = std::get_if<StopReason>(&result)) {
    if (!(layout_ && is_own_stop(*stop, layout_->node_rank))) {
      end_with(job_stopped(*stop));
      say(stop->survivors.empty() ? fmt::format("the job failed on another node: {}", stop->text)
                                  : stop->text);
    }
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
