// SPDX-License-Identifier: MIT
// The Agent's side of a standby store (--rdzv_endpoint PRIMARY,STANDBY, docs/scale.md): when the
// job's store is lost, this node asks the standby to take over instead of ending the job. The
// standby decides (one promotion job-wide); NodeSession does the talking. Once it serves, the
// next rounds and their workers use it, a join or an exit barrier the loss interrupted is taken
// up again there, and the primary's host, if it was a node of the job, is lost like any node:
// its heartbeats stop on the standby and the survivors re-form.
#include <fmt/format.h>
#include <boost/asio/post.hpp>

#include <memory>
#include <utility>
#include <variant>

#include "launcher/run/agent.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/token_auth.hpp"

namespace ddp::launcher {

void Agent::host_standby_store() {
  const StorePlan& plan = setup_.store;
  // After the first round: the primary serves then (this node met through it), and the
  // subscription's snapshot carries that round. Never next to the primary, whose host's loss it
  // must survive; never after a failover (the standby is then the job's store).
  if (standby_store_tried_ || plan.standby_role == StoreRole::Client || store_ ||
      !setup_.multinode || failover_ != Failover::None) {
    return;
  }
  standby_store_tried_ = true;
  rdzv::StoreServerOptions options;
  options.bind_address = plan.standby_bind_address;
  options.port = static_cast<std::uint16_t>(plan.standby_port);
  const bool v6 = plan.connect_host.find(':') != std::string::npos;
  options.replication.follow = v6 ? fmt::format("[{}]:{}", plan.connect_host, setup_.master_port)
                                  : fmt::format("{}:{}", plan.connect_host, setup_.master_port);
  if (const std::string& token = setup_.multinode->token; !token.empty()) {
    options.access_policy = std::make_shared<rdzv::TokenAccessPolicy>(token);
    options.replication.after_connect = rdzv::token_prover(token);
  }
  const std::string where = fmt::format("{}:{}", plan.standby_bind_address, plan.standby_port);
  try {
    // The failure comes from the store's thread; the Agent hears of it on its own loop.
    standby_store_ = std::make_unique<HostedStore>(options, [this, where](const std::string& why) {
      boost::asio::post(io_, [this, where, why] {
        events_.emit("standby_store", {{"role", "failed"}, {"address", where}, {"error", why}});
        say(fmt::format("could not serve the standby store at {}: {}; the job has no standby",
                        where, why));
      });
    });
  } catch (const rdzv::StoreBindError&) {
    return;  // not this host's address, or another node (or a --store-only --follow) serves it
  }
  events_.emit("standby_store",
               {{"role", "host"}, {"address", where}, {"following", options.replication.follow}});
  say(fmt::format("serving the standby store at {} (following {})", where,
                  options.replication.follow));
}

HostedStore* Agent::job_store() const {
  if (store_) return store_.get();
  // One standby address, so a standby this node hosts is the one that took over.
  return failover_ == Failover::TookOver ? standby_store_.get() : nullptr;
}

bool Agent::may_fail_over() const {
  return session_ && setup_.multinode && setup_.multinode->standby.port != 0 &&
         failover_ == Failover::None;
}

bool Agent::takes_store_loss(const NodeLoss& loss) {
  if (failover_ == Failover::Asking) return true;  // another report of the same loss
  // Before this node's first round the store may simply not be up yet: that is no failover.
  if (!may_fail_over() || (phase_ == Phase::Starting && !round_)) return false;
  failover_ = Failover::Asking;
  const HostPort& standby = setup_.multinode->standby;
  events_.emit("store_lost", {{"message", loss.text},
                              {"standby", fmt::format("{}:{}", standby.host, standby.port)}});
  say(fmt::format("{}; asking the standby store at {}:{} to take over", loss.text, standby.host,
                  standby.port));
  const auto since = std::chrono::steady_clock::now();
  session_->fail_over([this, loss, since](const JobRendezvous::FailoverResult& result) {
    on_failed_over(loss, result, since);
  });
  return true;
}

bool Agent::rejoin_after_failover(int attempt, const std::string& error) {
  if (failover_ != Failover::Asking) return false;
  rejoin_ = PendingJoin{attempt, error};
  return true;
}

bool Agent::resume_barrier_after_failover(const NodeLoss& loss) {
  if (loss.node_rank || !takes_store_loss(loss)) return false;
  resume_barrier_ = true;
  return true;
}

void Agent::on_failed_over(const NodeLoss& loss, const JobRendezvous::FailoverResult& result,
                           std::chrono::steady_clock::time_point since) {
  // One standby, one failover: a second loss ends the job.
  failover_ = std::holds_alternative<StorePromoted>(result) ? Failover::TookOver : Failover::Failed;
  std::optional<PendingJoin> rejoin = std::exchange(rejoin_, std::nullopt);
  const bool resume_barrier = std::exchange(resume_barrier_, false);
  if (phase_ == Phase::Done) return;
  if (const auto* error = std::get_if<std::string>(&result)) {
    events_.emit("store_failover_failed", {{"error", *error}});
    const std::string text = fmt::format("{}; {}", loss.text, *error);
    // The loss ends the job as it would have without a standby, from where it interrupted.
    if (rejoin) {
      on_joined(rejoin->attempt,
                JobRendezvous::JoinResult{fmt::format("{}; {}", rejoin->error, *error)});
    } else if (resume_barrier) {
      on_barrier(NodeLoss{text, std::nullopt});
    } else {
      on_node_lost(NodeLoss{text, std::nullopt});
    }
    return;
  }
  const auto& promoted = std::get<StorePromoted>(result);
  const std::string from = fmt::format("{}:{}", setup_.store.connect_host, setup_.master_port);
  // The next rounds' workers get the new store (directly, or through a proxy pointed at it).
  setup_.config.master_addr = promoted.host;
  setup_.store.connect_host = promoted.host;
  setup_.master_port = promoted.port;
  std::string proxy_note;
  if (proxy_) {
    proxy_.reset();
    try {
      proxy_ =
          std::make_unique<NodeStoreProxy>(promoted.host, static_cast<std::uint16_t>(promoted.port),
                                           setup_.config.store_proxy_max_watched_keys);
    } catch (const std::runtime_error& e) {
      proxy_note = fmt::format(" (--store-proxy: {}; workers connect directly)", e.what());
    }
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  events_.emit("store_failover", {{"from", from},
                                  {"to", fmt::format("{}:{}", promoted.host, promoted.port)},
                                  {"epoch", promoted.epoch},
                                  {"seconds", took}});
  say(
      fmt::format("the standby store at {}:{} took over (epoch {}, {:.2f} s after the loss was "
                  "noticed){}",
                  promoted.host, promoted.port, promoted.epoch, took, proxy_note));
  if (rejoin && phase_ == Phase::Starting) {
    session_->join(rejoin->attempt, next_round_,
                   [this, attempt = rejoin->attempt](const JobRendezvous::JoinResult& r) {
                     on_joined(attempt, r);
                   });
  } else if (resume_barrier && phase_ == Phase::Finishing) {
    session_->exit_barrier([this](const JobRendezvous::BarrierResult& r) { on_barrier(r); });
  }
}

}  // namespace ddp::launcher
