// SPDX-License-Identifier: MIT
#include "launcher/multinode/etcd_session.hpp"

#include <boost/asio/post.hpp>

#include "launcher/multinode/hosted_store.hpp"
#include "launcher/multinode/node_session.hpp"  // encode_stop_reason / decode_stop_reason

namespace ddp::launcher {
namespace {

using rdzv::etcd::EtcdRoundProtocol;
using rdzv::etcd::EtcdUnavailable;

rdzv::etcd::ClientOptions client_options(const MultiNodeSettings& settings) {
  rdzv::etcd::ClientOptions options;
  options.endpoints = rdzv::etcd::parse_endpoints(settings.etcd.endpoints);
  options.timeout = std::min(settings.read_timeout, settings.heartbeat_timeout);
  options.user = settings.etcd.user;
  options.password = settings.etcd.password;
  options.tls = {settings.etcd.tls, settings.etcd.tls_ca, settings.etcd.tls_cert,
                 settings.etcd.tls_key};
  return options;
}

EtcdRoundProtocol::Options protocol_options(const MultiNodeSettings& settings) {
  EtcdRoundProtocol::Options options;
  options.prefix = settings.etcd.prefix;
  options.run_id = settings.run_id;
  options.token = settings.token;
  options.endpoints = settings.etcd.endpoints;
  options.node_name = settings.node_name;
  options.local_world_size = settings.local_world_size;
  options.node_rank = settings.node_rank;
  options.must_agree = settings.must_agree;
  options.min_nodes = settings.min_nodes;
  options.max_nodes = settings.max_nodes;
  options.dynamic = settings.dynamic;
  options.spares = settings.spares;
  options.join_timeout = settings.join_timeout;
  options.last_call_timeout = settings.last_call_timeout;
  options.read_timeout = settings.read_timeout;
  options.heartbeat_interval = settings.heartbeat_interval;
  options.heartbeat_timeout = settings.heartbeat_timeout;
  return options;
}

EtcdRoundProtocol::Ask ask_of(const RoundPlan& plan) {
  EtcdRoundProtocol::Ask ask;
  ask.nodes = plan.nodes;
  ask.node_rank = plan.node_rank;
  ask.join_timeout = plan.join_timeout;
  ask.restarts_used = plan.restarts_used;
  ask.rescales_used = plan.rescales_used;
  ask.previous_round = plan.previous_round;
  ask.previous_round_nodes = plan.previous_round_nodes;
  return ask;
}

// The stop reason a payload the stop key held stands for: `offered` itself when it is the one.
StopReason stop_of(const std::string& payload, const StopReason& offered,
                   const std::string& offered_payload) {
  return payload == offered_payload ? offered : decode_stop_reason(payload);
}

}  // namespace

EtcdSession::EtcdSession(boost::asio::io_context& agent_io, MultiNodeSettings settings,
                         Events events)
    : agent_io_(agent_io),
      settings_(std::move(settings)),
      events_(std::move(events)),
      cluster_(client_options(settings_)),
      protocol_(
          std::make_unique<EtcdRoundProtocol>(cluster_, protocol_options(settings_), callbacks())),
      work_(io_.get_executor()),
      thread_([this] { io_.run(); }) {}

EtcdSession::~EtcdSession() {
  protocol_->cancel();
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
  // Stops the keepalive and the watch and, unless a blocked join was abandoned (detached), gives
  // this node's lease up (an agent that ends without leave(), e.g. 74, included).
  protocol_.reset();
  store_.reset();
}

EtcdRoundProtocol::Callbacks EtcdSession::callbacks() {
  EtcdRoundProtocol::Callbacks c;
  c.on_note = [this](const std::string& line) {
    on_loop([this, line] {
      if (events_.on_note) events_.on_note(line);
    });
  };
  c.on_join_progress = [this](std::chrono::milliseconds waited, const std::string& status) {
    on_loop([this, waited, status] {
      if (events_.on_join_progress) events_.on_join_progress(waited, status);
    });
  };
  c.on_waiting = [this](const std::string& role) {
    on_loop([this, role] {
      if (events_.on_waiting) events_.on_waiting(role);
    });
  };
  c.on_lost = [this](const std::string& text, std::optional<int> node_rank) {
    on_loop([this, loss = NodeLoss{text, node_rank}] { events_.on_lost(loss); });
  };
  c.on_dropped = [this](const std::string& line) {
    on_loop([this, loss = NodeLoss{line, std::nullopt, true}] { events_.on_lost(loss); });
  };
  c.on_stop = [this](const std::string& payload) {
    on_loop([this, reason = decode_stop_reason(payload)] { events_.on_stop(reason); });
  };
  c.on_pending = [this](const std::vector<rdzv::JoinRequest>& live) {
    on_loop([this, live] {
      if (events_.on_pending) events_.on_pending(live);
    });
  };
  c.on_progress_elsewhere = [this](std::optional<long long> best, bool others_started) {
    on_loop([this, best, others_started] {
      if (events_.on_progress_elsewhere) events_.on_progress_elsewhere(best, others_started);
    });
  };
  if (events_.on_node_views) {
    c.on_views = [this](const std::vector<rdzv::NodeView>& views) {
      on_loop([this, views] {
        if (events_.on_node_views) events_.on_node_views(views);
      });
    };
  }
  c.host_store = [this] { return host_store(); };
  return c;
}

std::pair<std::string, int> EtcdSession::host_store() {
  rdzv::StoreServerOptions options;
  options.bind_address = settings_.etcd.store_bind;
  options.port = static_cast<std::uint16_t>(settings_.etcd.store_port);
  try {
    store_ = std::make_unique<HostedStore>(options);
  } catch (const std::exception&) {
    if (options.port == 0) throw;
    options.port = 0;  // the configured port is taken (a previous attempt's): any free one
    store_ = std::make_unique<HostedStore>(options);
  }
  return {settings_.etcd.store_address, store_->port()};
}

bool EtcdSession::detach_if_blocked() {
  if (!busy_) return false;
  protocol_->abandon();
  io_.stop();
  thread_.detach();
  return true;
}

void EtcdSession::on_loop(std::function<void()> f) { boost::asio::post(agent_io_, std::move(f)); }

void EtcdSession::join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) {
  note_progress(0, std::nullopt, false);  // every round's progress starts from none
  boost::asio::post(io_, [this, round, ask = ask_of(plan), done = std::move(done)] {
    busy_ = true;
    store_.reset();  // every worker of the last attempt is reaped before the next join
    JoinResult result;
    try {
      result = protocol_->join(round, ask);
    } catch (const EtcdUnavailable& e) {
      result = std::string(e.what());
      protocol_->report_etcd_lost(e.what());
    } catch (const rdzv::etcd::NodeDroppedError& e) {
      result = NodeLoss{e.what(), std::nullopt, true};
    } catch (const rdzv::RoundMembersLostError& e) {
      result = NodeLoss{e.what(), std::nullopt};
    } catch (const std::exception& e) {
      result = std::string(e.what());
    }
    busy_ = false;
    on_loop([done, result] { done(result); });
  });
}

void EtcdSession::note_progress(long long events, std::optional<long long> best_step,
                                bool all_started) {
  protocol_->note_progress(events, best_step, all_started);
}

void EtcdSession::note_view(std::string record) { protocol_->note_view(std::move(record)); }

void EtcdSession::broadcast_stop(const StopReason& reason) {
  boost::asio::post(io_, [this, reason] {
    const std::string offered = encode_stop_reason(reason);
    if (protocol_->offer_stop(offered) != offered || reason.admitted.empty()) return;
    // This re-form won: its pending nodes take the node ranks after the survivors'.
    protocol_->invite(reason.admitted,
                      static_cast<int>(reason.survivors.size() + reason.admitted.size()),
                      static_cast<int>(reason.survivors.size()));
  });
}

void EtcdSession::answer_pending(const PendingAnswer& answer) {
  boost::asio::post(io_, [this, answer] {
    switch (answer.kind) {
      case PendingAnswer::Kind::Spare:
        protocol_->mark_spare(answer.seq);
        break;
      case PendingAnswer::Kind::Refused:
        protocol_->refuse(answer.seq, answer.reason);
        break;
      case PendingAnswer::Kind::Restart:
        protocol_->invite_restart(answer.seq, answer.round);
        break;
    }
  });
}

void EtcdSession::settle_stop(const StopReason& reason, std::function<void(StopReason)> done) {
  boost::asio::post(io_, [this, reason, done = std::move(done)] {
    const std::string offered = encode_stop_reason(reason);
    StopReason winner = stop_of(protocol_->offer_stop(offered), reason, offered);
    on_loop([done, winner] { done(winner); });
  });
}

void EtcdSession::exit_barrier(std::function<void(BarrierResult)> done) {
  protocol_->clear_cancel();
  boost::asio::post(io_, [this, done = std::move(done)] {
    const EtcdRoundProtocol::BarrierResult end = protocol_->exit_barrier();
    BarrierResult result = AllNodesDone{};
    switch (end.end) {
      case EtcdRoundProtocol::BarrierResult::End::AllDone:
        break;
      case EtcdRoundProtocol::BarrierResult::End::Stopped:
        result = decode_stop_reason(end.stop);
        break;
      case EtcdRoundProtocol::BarrierResult::End::Lost:
        result = NodeLoss{end.loss, std::nullopt};
        break;
    }
    on_loop([done, result] { done(result); });
  });
}

void EtcdSession::leave(bool /*wait_for_others*/, std::function<void()> then) {
  protocol_->clear_cancel();
  boost::asio::post(io_, [this, then = std::move(then)] {
    // Nobody needs to wait for this node: the outcome is in etcd, not in its store.
    protocol_->leave();
    store_.reset();
    on_loop(then);
  });
}

}  // namespace ddp::launcher
