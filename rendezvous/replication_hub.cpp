#include "rendezvous/replication_hub.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "rendezvous/command_handler.hpp"
#include "rendezvous/log.hpp"
#include "rendezvous/replication.hpp"
#include "rendezvous/store_follower.hpp"
#include "rendezvous/store_session.hpp"

namespace ddp::rdzv {

namespace {
// The model's client id for mutations applied from the primary's stream (sessions count from 1).
constexpr ClientId kReplicaClient = ~ClientId{0};

std::string bytes_reply(std::string_view text) {
  std::string out;
  put_bytes(out, text);
  return out;
}
}  // namespace

bool ReplicationHub::refuse_by_role(StoreSession& session, const Command& cmd, bool handshake) {
  if (role_ == Role::Primary || (role_ == Role::Standby && standby_admits(cmd, handshake))) {
    return false;
  }
  if (role_ == Role::Fenced) {
    session.close_for_error(
        fmt::format("this store was fenced: a standby was promoted to epoch {}", epoch_));
  } else if (cmd.op == Op::Get && cmd.keys.size() == 1 && cmd.keys[0] == kFollowKey) {
    session.close_for_error("a standby cannot be followed");
  } else {
    session.close_for_error(fmt::format(
        "this store is a standby of {}; it serves only after promotion", options_.follow));
  }
  return true;
}

bool ReplicationHub::intercept(StoreSession& session, const Command& cmd, StoreModel& model,
                               const CloseAll& close_all) {
  if (role_ == Role::Fenced) {
    session.close_for_error(
        fmt::format("this store was fenced: a standby was promoted to epoch {}", epoch_));
    return true;
  }
  if (cmd.op == Op::Validate || cmd.op == Op::Ping) return false;
  const std::string_view key =
      cmd.keys.empty() ? std::string_view{} : std::string_view(cmd.keys[0]);
  if (cmd.op == Op::CompareSet && key == kPromoteKey) {
    promote(session, cmd);
    return true;
  }
  if (cmd.op == Op::Get && key == kFollowKey) {
    if (role_ != Role::Primary) {
      session.close_for_error("a standby cannot be followed");
    } else {
      subscribe(session, model);
    }
    return true;
  }
  if (cmd.op == Op::Set && key == kAckKey) {
    acknowledge(session, cmd);
    return true;
  }
  if (cmd.op == Op::Set && key == kFenceKey) {
    const auto epoch =
        parse_epoch(cmd.values.empty() ? std::string_view{} : std::string_view(cmd.values[0]));
    if (role_ == Role::Primary && epoch && *epoch > epoch_) {
      role_ = Role::Fenced;
      epoch_ = *epoch;
      log_line(fmt::format(
          "fenced: a standby was promoted to epoch {}; refusing every request from now on",
          epoch_));
      close_all(fmt::format("this store was fenced: a standby was promoted to epoch {}", epoch_));
    } else {
      session.close_for_error("stale fence request");
    }
    return true;
  }
  if (role_ == Role::Standby) {
    session.close_for_error(fmt::format(
        "this store is a standby of {}; it serves only after promotion", options_.follow));
    return true;
  }
  return false;
}

void ReplicationHub::subscribe(StoreSession& session, StoreModel& model) {
  // The snapshot and the stream are one sequence: nothing runs between these lines and the
  // next publish() (one thread).
  // Registered first: a follower's own output is never held. Clients' output is held from here
  // until it acknowledged the snapshot, so what they see from now on is on the standby.
  followers_[session.id()] = Follower{session.weak_from_this(), sequence_, {}};
  session.send(bytes_reply(std::to_string(epoch_)));
  const ReplicationSnapshot snapshot = encode_snapshot(model, sequence_);
  session.send(snapshot.frames);
  if (auto it = followers_.find(session.id()); it != followers_.end()) {
    if (it->second.acknowledged < sequence_)
      it->second.owing_since = std::chrono::steady_clock::now();
  }
  update_acknowledged();
  log_line(
      fmt::format("replication: follower connection {} subscribed at sequence {} ({} keys and {} "
                  "queue items in the snapshot)",
                  session.id(), sequence_, snapshot.keys, snapshot.queue_items));
}

void ReplicationHub::promote(StoreSession& session, const Command& cmd) {
  const auto proposal =
      parse_epoch(cmd.values.size() == 2 ? std::string_view(cmd.values[1]) : std::string_view{});
  if (!proposal) {
    session.close_for_error("promote: the proposed epoch is not a positive number");
    return;
  }
  // What the socket already holds comes first: the last mutations, or the primary's notice
  // that it dropped this standby.
  if (role_ == Role::Standby && link_) link_->drain();
  if (role_ == Role::Standby && link_ && !link_->dropped_because().empty()) {
    log_line(fmt::format(
        "refusing promotion to epoch {}: {} dropped this standby ({}), so it may lack writes its "
        "clients saw acknowledged",
        *proposal, options_.follow, link_->dropped_because()));
  } else if (role_ == Role::Standby) {
    const std::int64_t primary_epoch = link_ ? link_->primary_epoch() : 0;
    if (*proposal > std::max(primary_epoch, epoch_)) {
      const std::uint64_t applied = link_ ? link_->last_sequence() : 0;
      if (link_) link_->fence(*proposal);
      link_.reset();
      role_ = Role::Primary;
      epoch_ = *proposal;
      log_line(fmt::format("promoted to primary at epoch {} after applying {} mutations of {}",
                           epoch_, applied, options_.follow));
    }
  }
  // The winner and every later proposer learn the epoch in force.
  session.send(bytes_reply(std::to_string(epoch_)));
}

void ReplicationHub::publish(const Command& mutation) {
  std::string frame;
  bool dropped = false;
  for (auto it = followers_.begin(); it != followers_.end();) {
    auto session = it->second.session.lock();
    if (!session || !session->is_open()) {
      it = followers_.erase(it);
      dropped = true;
      continue;
    }
    if (session->pending_output_bytes() > options_.max_follower_lag_bytes) {
      it = followers_.erase(it);
      dropped = true;
      drop(*session,
           fmt::format("follower is {} bytes behind (--max-follower-lag-bytes {}); dropping it: "
                       "that standby is no longer current",
                       session->pending_output_bytes(), options_.max_follower_lag_bytes));
      continue;
    }
    if (frame.empty()) frame = encode_replication_frame(sequence_ + 1, mutation);
    if (it->second.acknowledged == sequence_) {
      it->second.owing_since = std::chrono::steady_clock::now();
    }
    session->send(frame);
    ++it;
  }
  if (!frame.empty()) ++sequence_;
  if (dropped) update_acknowledged();
}

void ReplicationHub::acknowledge(StoreSession& session, const Command& cmd) {
  const auto it = followers_.find(session.id());
  const auto sequence =
      parse_sequence(cmd.values.empty() ? std::string_view{} : std::string_view(cmd.values[0]));
  if (it == followers_.end() || !sequence || *sequence > sequence_ ||
      *sequence < it->second.acknowledged) {
    session.close_for_error(it == followers_.end() ? "acknowledgement from a connection that is "
                                                     "not a follower"
                                                   : "acknowledgement of an unsent sequence");
    return;
  }
  it->second.acknowledged = *sequence;
  if (*sequence < sequence_) it->second.owing_since = std::chrono::steady_clock::now();
  update_acknowledged();
}

void ReplicationHub::drop(StoreSession& session, const std::string& reason) {
  // Told, so that a standby that runs again knows it is not current (never promoted with
  // acknowledged writes missing): the notice follows the frames it is still owed, numbered as
  // the next frame for it alone (the others' stream goes on without a gap), and the connection
  // closes once the standby has read it all and closed its side, or is reset at the deadline.
  followers_.erase(session.id());
  session.close_after_output(
      reason, encode_replication_frame(
                  sequence_ + 1, Command{Op::Set, {std::string(kDroppedKey)}, {reason}, 0, 0}));
  if (session.is_open()) {
    closing_.push_back(Closing{session.weak_from_this(),
                               std::chrono::steady_clock::now() + options_.dropped_drain_timeout});
  }
}

void ReplicationHub::end_overdue_closings(std::chrono::steady_clock::time_point now) {
  std::erase_if(closing_, [this, now](const Closing& closing) {
    auto session = closing.session.lock();
    if (!session || !session->is_open()) return true;
    if (now < closing.deadline) return false;
    if (session->pending_output_bytes() > 0) {
      log_line(fmt::format(
          "a dropped follower did not read its last {} bytes within {} ms; resetting it: it may "
          "not know it was dropped",
          session->pending_output_bytes(), options_.dropped_drain_timeout.count()));
    }
    session->close_now();
    return true;
  });
}

void ReplicationHub::follower_closed(ClientId id) {
  if (followers_.erase(id) > 0) update_acknowledged();
}

void ReplicationHub::update_acknowledged() {
  std::uint64_t least = sequence_;
  for (const auto& [id, follower] : followers_) least = std::min(least, follower.acknowledged);
  const bool advanced = least > acknowledged_;
  acknowledged_ = least;
  if (advanced && released_) released_(acknowledged_);
}

std::optional<std::chrono::steady_clock::time_point> ReplicationHub::next_ack_deadline() const {
  std::optional<std::chrono::steady_clock::time_point> earliest;
  for (const Closing& closing : closing_) {
    if (!earliest || closing.deadline < *earliest) earliest = closing.deadline;
  }
  for (const auto& [id, follower] : followers_) {
    if (follower.acknowledged == sequence_) continue;
    const auto deadline = follower.owing_since + options_.ack_timeout;
    if (!earliest || deadline < *earliest) earliest = deadline;
  }
  return earliest;
}

void ReplicationHub::drop_overdue_followers(std::chrono::steady_clock::time_point now) {
  end_overdue_closings(now);
  std::vector<std::shared_ptr<StoreSession>> overdue;
  for (auto it = followers_.begin(); it != followers_.end();) {
    const Follower& follower = it->second;
    if (follower.acknowledged == sequence_ || now < follower.owing_since + options_.ack_timeout) {
      ++it;
      continue;
    }
    if (auto session = follower.session.lock()) {
      overdue.push_back(std::move(session));
      ++it;  // drop() unregisters it after the notice, which must not wait on itself
    } else {
      it = followers_.erase(it);
    }
  }
  for (auto& session : overdue) {
    drop(*session, fmt::format("follower did not acknowledge sequence {} within {} ms "
                               "(--follower-ack-timeout); dropping it: that standby is no longer "
                               "current, replies no longer wait for it",
                               sequence_, options_.ack_timeout.count()));
  }
  update_acknowledged();
}

void ReplicationHub::start_following(boost::asio::io_context& io, const StoreLimits& limits,
                                     StoreModel& model) {
  role_ = Role::Standby;
  link_ = std::make_shared<StoreFollower>(
      io, options_.follow, limits, options_.after_connect, [this, &model, limits](Command&& cmd) {
        Outcome outcome =
            handle_command(model, kReplicaClient, Generation::G2, std::move(cmd), false, limits);
        if (outcome.close_reason) {
          log_line(fmt::format(
              "standby: a mutation of the primary was refused here ({}); this standby has diverged",
              *outcome.close_reason));
        }
      });
  link_->connect();
  link_->start();
}

void ReplicationHub::stop() {
  if (link_) link_->stop();
  link_.reset();
}

}  // namespace ddp::rdzv
