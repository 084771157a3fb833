// SPDX-License-Identifier: MIT
#include "launcher/multinode/node_session.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <charconv>

namespace ddp::launcher {

std::string encode_stop_reason(const StopReason& r) {
  if (!r.survivors.empty() && !r.admitted.empty()) {
    return fmt::format("{}|{}|rescale={}|admit={}|{}", r.exit_code, r.node_rank,
                       fmt::join(r.survivors, ","), fmt::join(r.admitted, ","), r.text);
  }
  if (!r.survivors.empty()) {
    return fmt::format("{}|{}|rescale={}|{}", r.exit_code, r.node_rank, fmt::join(r.survivors, ","),
                       r.text);
  }
  return fmt::format("{}|{}|{}", r.exit_code, r.node_rank, r.text);
}

StopReason decode_stop_reason(const std::string& encoded) {
  StopReason r;
  // Leading "<int>|" fields: exit code, then node rank; what does not parse is the text.
  auto take_int = [&encoded](size_t from, int& value) -> size_t {
    auto bar = encoded.find('|', from);
    if (bar == std::string::npos) return std::string::npos;
    int parsed = 0;
    auto [end, ec] = std::from_chars(encoded.data() + from, encoded.data() + bar, parsed);
    if (ec != std::errc{} || end != encoded.data() + bar) return std::string::npos;
    value = parsed;
    return bar + 1;
  };
  size_t at = take_int(0, r.exit_code);
  // A stop is a failure: whoever wrote the record (without a token, anyone who reaches the
  // store) cannot make the job end in success or with a code outside 1..255.
  if (r.exit_code < 1 || r.exit_code > 255) r.exit_code = 1;
  if (at == std::string::npos) {
    r.text = encoded;  // another agent version: keep the words, exit 1
    return r;
  }
  size_t after_node = take_int(at, r.node_rank);
  if (after_node == std::string::npos) {
    r.text = encoded.substr(at);
    return r;
  }
  constexpr std::string_view kRescale = "rescale=";
  if (encoded.compare(after_node, kRescale.size(), kRescale) == 0) {
    size_t from = after_node + kRescale.size();
    const size_t bar = encoded.find('|', from);
    std::vector<int> survivors;
    bool ok = bar != std::string::npos;
    while (ok && from < bar) {
      size_t comma = std::min(encoded.find(',', from), bar);
      int rank = 0;
      auto [end, ec] = std::from_chars(encoded.data() + from, encoded.data() + comma, rank);
      ok = ec == std::errc{} && end == encoded.data() + comma && rank >= 0;
      survivors.push_back(rank);
      from = comma + 1;
    }
    if (ok && !survivors.empty()) {
      r.survivors = std::move(survivors);
      r.text = encoded.substr(bar + 1);
      constexpr std::string_view kAdmit = "admit=";
      if (r.text.compare(0, kAdmit.size(), kAdmit) == 0) {
        const size_t end = r.text.find('|');
        std::vector<std::int64_t> admitted;
        bool fine = end != std::string::npos;
        for (size_t at = kAdmit.size(); fine && at < end;) {
          const size_t comma = std::min(r.text.find(',', at), end);
          std::int64_t seq = 0;
          auto [stop, ec] = std::from_chars(r.text.data() + at, r.text.data() + comma, seq);
          fine = ec == std::errc{} && stop == r.text.data() + comma && seq > 0;
          admitted.push_back(seq);
          at = comma + 1;
        }
        if (fine && !admitted.empty()) {
          r.admitted = std::move(admitted);
          r.text = r.text.substr(end + 1);
        }
      }
      return r;
    }
  }
  r.text = encoded.substr(after_node);
  return r;
}

NodeSession::NodeSession(boost::asio::io_context& agent_io, MultiNodeSettings settings,
                         rdzv::StoreClientOptions store, Events events)
    : agent_io_(agent_io),
      settings_(std::move(settings)),
      store_(std::move(store)),
      events_(std::move(events)),
      work_(io_.get_executor()),
      thread_([this] { io_.run(); }) {}

NodeSession::~NodeSession() {
  cancel_ = true;
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

bool NodeSession::detach_if_blocked() {
  if (!busy_) return false;
  // Only a join can still be blocked here (ddprun was interrupted while waiting for the other
  // nodes): it ends by itself at join_timeout. ddprun is about to exit, so the session is left
  // to the process's end instead of holding the exit for minutes.
  cancel_ = true;
  io_.stop();
  thread_.detach();
  return true;
}

void NodeSession::on_loop(std::function<void()> f) { boost::asio::post(agent_io_, std::move(f)); }

void NodeSession::open_client() {
  // Barrier and leave wait in slices of one heartbeat interval; every call (and a reconnect)
  // fails within half the heartbeat timeout, so a store lost during the barrier is reported
  // within heartbeat_timeout, not after read_timeout.
  rdzv::StoreClientOptions ending = store_;
  ending.timeout = std::min(settings_.read_timeout, settings_.heartbeat_timeout / 2);
  ending.connect_timeout = settings_.heartbeat_timeout / 2;
  ending.max_backoff = std::min(ending.max_backoff, settings_.heartbeat_interval);
  client_ = std::make_unique<rdzv::StoreClient>(rdzv::with_token(ending, settings_.token));
}

void NodeSession::start_monitor() {
  rdzv::NodeMonitor::Callbacks callbacks;
  callbacks.on_node_lost = [this](const rdzv::NodeAssignment& lost) {
    NodeLoss loss{fmt::format("lost node {} ({}): no heartbeat for {:.3g} s", lost.node_rank,
                              lost.name, settings_.heartbeat_timeout.count() / 1000.0),
                  lost.node_rank};
    on_loop([this, loss] { events_.on_lost(loss); });
  };
  callbacks.on_stop = [this](const std::string& encoded) {
    StopReason reason = decode_stop_reason(encoded);
    on_loop([this, reason] { events_.on_stop(reason); });
  };
  callbacks.on_pending =
      [this, generation = monitor_generation_](const std::vector<rdzv::JoinRequest>& pending) {
        on_loop([this, generation, pending] {
          if (generation == generation_ && events_.on_pending) events_.on_pending(pending);
        });
      };
  callbacks.local_progress = [this] {
    rdzv::NodeProgress p{progress_events_.load(std::memory_order_relaxed), std::nullopt,
                         all_started_.load(std::memory_order_relaxed)};
    if (has_best_step_.load(std::memory_order_relaxed))
      p.best_step = best_step_.load(std::memory_order_relaxed);
    return p;
  };
  callbacks.on_progress_elsewhere = [this](std::optional<std::int64_t> best, bool started) {
    on_loop([this, best, started] {
      if (events_.on_progress_elsewhere) events_.on_progress_elsewhere(best, started);
    });
  };
  callbacks.local_view = [this] {
    std::lock_guard lock(view_mutex_);
    return view_record_;
  };
  if (events_.on_node_views) {
    callbacks.on_views =
        [this, generation = monitor_generation_](const std::vector<rdzv::NodeView>& others) {
          on_loop([this, generation, others] {
            if (generation == generation_ && events_.on_node_views) events_.on_node_views(others);
          });
        };
  }
  callbacks.on_store_lost =
      [this, where = fmt::format("{}:{}", store_.host, store_.port)](const std::string& error) {
        NodeLoss loss{fmt::format("lost the store at {} (node 0 gone?): {}", where, error),
                      std::nullopt};
        on_loop([this, loss] { events_.on_lost(loss); });
      };
  // The monitor's calls must fail well within the heartbeat timeout: over a cut link a call
  // would otherwise wait read_timeout (60 s) before the store counts as lost.
  rdzv::StoreClientOptions watching = store_;
  watching.timeout = settings_.heartbeat_timeout / 2;
  watching.connect_timeout = settings_.heartbeat_timeout / 2;
  monitor_ = std::make_unique<rdzv::NodeMonitor>(
      watching, round_, *joined_,
      rdzv::NodeMonitor::Options{settings_.heartbeat_interval, settings_.heartbeat_timeout},
      std::move(callbacks));
}

void NodeSession::join(int round, const RoundPlan& plan, std::function<void(JoinResult)> done) {
  note_progress(0, std::nullopt, false);  // every round's progress key starts from none
  note_view({});
  const int generation = ++generation_;
  boost::asio::post(io_, [this, round, plan, generation, done = std::move(done)] {
    busy_ = true;
    monitor_.reset();
    monitor_generation_ = generation;
    round_ = round_options(round, plan);
    forward_round_news();
    JoinResult result = join_round();
    busy_ = false;
    on_loop([done, result] { done(result); });
  });
}

rdzv::NodeRendezvousOptions NodeSession::round_options(int round, const RoundPlan& plan) const {
  rdzv::NodeRendezvousOptions options;
  options.run_id = settings_.run_id;
  options.round = round;
  options.token = settings_.token;
  options.min_nodes = settings_.min_nodes;
  options.max_nodes = settings_.max_nodes;
  options.node_rank = settings_.node_rank;
  options.local_world_size = settings_.local_world_size;
  options.node_name = settings_.node_name;
  options.join_timeout = settings_.join_timeout;
  options.must_agree = settings_.must_agree;
  options.leader_timeout = settings_.refused_timeout;
  options.last_call_timeout = settings_.last_call_timeout;
  if (plan.nodes > 0) {  // a re-form: exactly these nodes, in this order
    options.min_nodes = options.max_nodes = plan.nodes;
    options.node_rank = plan.node_rank;
  }
  if (plan.join_timeout.count() > 0) options.join_timeout = plan.join_timeout;
  options.previous_round = plan.previous_round;
  options.survivors_previous_ranks = plan.survivors_previous_ranks;
  options.survivor_heartbeat_timeout = settings_.heartbeat_timeout;
  options.previous_node_rank = plan.previous_node_rank;
  options.previous_round_nodes = plan.previous_round_nodes;
  // c10d: a join that finds its round closed (the job runs without this node) waits to be
  // admitted instead of failing.
  options.may_wait_pending = (settings_.dynamic || settings_.spares) && plan.nodes == 0;
  options.pending_heartbeat = std::min<std::chrono::milliseconds>(settings_.heartbeat_interval,
                                                                  std::chrono::milliseconds(500));
  options.excluded_hosts = settings_.excluded_hosts;
  options.default_id_command = settings_.default_id_command;
  if (client_) {  // this node took part before: the job's counts are its own
    options.restarts_used = plan.restarts_used;
    options.rescales_used = plan.rescales_used;
  }
  return options;
}

void NodeSession::forward_round_news() {
  round_.on_waiting = [this](const std::string& role) {
    on_loop([this, role] {
      if (events_.on_waiting) events_.on_waiting(role);
    });
  };
  round_.on_warning = [this](const std::string& text) {
    on_loop([this, text] {
      if (events_.on_warning) events_.on_warning(text);
    });
  };
  round_.on_join_progress = [this](std::chrono::milliseconds waited, const std::string& status) {
    on_loop([this, waited, status] {
      if (events_.on_join_progress) events_.on_join_progress(waited, status);
    });
  };
}

NodeSession::JoinResult NodeSession::join_round() {
  JoinResult result;
  try {
    rdzv::StoreClientOptions joining = store_;
    joining.connect_timeout = round_.join_timeout;
    joining.timeout = round_.join_timeout + settings_.read_timeout;
    joining.refused_timeout = settings_.refused_timeout;
    joined_ = rdzv::join_rendezvous(joining, round_);
    round_.round = joined_->round;  // a pending node joins the round it was invited to
    if (!client_) open_client();
    start_monitor();
    // torch 2.x workers do not prefix their keys per attempt: the last attempt's must go first.
    rdzv::clear_previous_attempt(*client_, round_, *joined_, round_.join_timeout);
    result = *joined_;
  } catch (const rdzv::RoundMembersLostError& e) {
    monitor_.reset();
    joined_.reset();
    result = NodeLoss{e.what(), std::nullopt};
  } catch (const std::exception& e) {
    monitor_.reset();
    joined_.reset();
    result = std::string(e.what());
    if (dynamic_cast<const rdzv::StoreConnectError*>(&e) ||
        dynamic_cast<const rdzv::StoreRefusedError*>(&e)) {
      NodeLoss loss{fmt::format("lost the store at {}:{} (node 0 gone?): {}", store_.host,
                                store_.port, e.what()),
                    std::nullopt};
      on_loop([this, loss] { events_.on_lost(loss); });
    }
  }
  return result;
}

void NodeSession::broadcast_stop(const StopReason& reason) {
  boost::asio::post(io_, [this, reason] {
    if (!monitor_) return;
    try {
      const std::string encoded = encode_stop_reason(reason);
      if (monitor_->broadcast_stop(encoded) != encoded || reason.admitted.empty() || !client_)
        return;
      // This re-form won: its pending nodes take the node ranks after the survivors'.
      const int nodes = static_cast<int>(reason.survivors.size() + reason.admitted.size());
      for (size_t j = 0; j < reason.admitted.size(); ++j) {
        rdzv::invite_pending(*client_, settings_.run_id, reason.admitted[j], round_.round + 1,
                             nodes, static_cast<int>(reason.survivors.size() + j));
      }
    } catch (const std::exception&) {
      // The store is gone: the other nodes learn it from their own monitors.
    }
  });
}

void NodeSession::settle_stop(const StopReason& reason, std::function<void(StopReason)> done) {
  boost::asio::post(io_, [this, reason, done = std::move(done)] {
    StopReason winner = reason;
    if (monitor_) {
      try {
        const std::string encoded = encode_stop_reason(reason);
        const std::string held = monitor_->broadcast_stop(encoded);
        if (held != encoded) winner = decode_stop_reason(held);
      } catch (const std::exception&) {
        // The store is gone: this node's monitor reports the loss; its own reason stands.
      }
    }
    on_loop([done, winner] { done(winner); });
  });
}

void NodeSession::answer_pending(const PendingAnswer& answer) {
  boost::asio::post(io_, [this, answer] {
    if (!client_) return;
    try {
      switch (answer.kind) {
        case PendingAnswer::Kind::Spare:
          rdzv::mark_spare(*client_, settings_.run_id, answer.seq);
          break;
        case PendingAnswer::Kind::Refused:
          rdzv::refuse_pending(*client_, settings_.run_id, answer.seq, answer.reason);
          break;
        case PendingAnswer::Kind::Restart:
          rdzv::invite_pending(*client_, settings_.run_id, answer.seq, answer.round, 0, 0);
          break;
      }
    } catch (const std::exception&) {
      // The store is gone: the pending node's wait ends at its join timeout.
    }
  });
}

void NodeSession::note_progress(long long events, std::optional<long long> best_step,
                                bool all_started) {
  all_started_.store(all_started, std::memory_order_relaxed);
  progress_events_.store(events, std::memory_order_relaxed);
  if (best_step) best_step_.store(*best_step, std::memory_order_relaxed);
  has_best_step_.store(best_step.has_value(), std::memory_order_relaxed);
}

void NodeSession::note_view(std::string record) {
  std::lock_guard lock(view_mutex_);
  view_record_ = std::move(record);
}

void NodeSession::exit_barrier(std::function<void(BarrierResult)> done) {
  cancel_ = false;
  boost::asio::post(io_, [this, done = std::move(done)] {
    BarrierResult result = AllNodesDone{};
    try {
      if (!client_ || !joined_) throw rdzv::StoreError("not joined");
      // Bounded: a lost node is reported by the monitor, and the loop then cancels this wait.
      auto end = rdzv::exit_barrier(*client_, round_, *joined_, settings_.heartbeat_interval,
                                    [this] { return keep_waiting(); });
      if (end.end == rdzv::ExitBarrierResult::End::Stopped) result = decode_stop_reason(end.stop);
    } catch (const std::exception& e) {
      result =
          NodeLoss{fmt::format("lost the store at {}:{} during the exit barrier (node 0 gone?): {}",
                               store_.host, store_.port, e.what()),
                   std::nullopt};
    }
    on_loop([done, result] { done(result); });
  });
}

void NodeSession::leave(bool wait_for_others, std::function<void()> then) {
  cancel_ = false;
  boost::asio::post(io_, [this, wait_for_others, then = std::move(then)] {
    monitor_.reset();
    try {
      if (client_ && joined_) {
        rdzv::leave_round(*client_, round_, *joined_, wait_for_others, settings_.heartbeat_timeout,
                          settings_.heartbeat_interval, [this] { return keep_waiting(); });
      }
    } catch (const std::exception&) {
      // Leaving is best effort: the store may already be gone.
    }
    on_loop(then);
  });
}

}  // namespace ddp::launcher
