#include "rendezvous/replication_hub.hpp"

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
  followers_[session.id()] = session.weak_from_this();
  session.send(bytes_reply(std::to_string(epoch_)));
  const ReplicationSnapshot snapshot = encode_snapshot(model, sequence_);
  session.send(snapshot.frames);
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
  if (role_ == Role::Standby) {
    const std::int64_t primary_epoch = link_ ? link_->primary_epoch() : 0;
    if (*proposal > std::max(primary_epoch, epoch_)) {
      if (link_) link_->drain();
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
  for (auto it = followers_.begin(); it != followers_.end();) {
    auto session = it->second.lock();
    if (!session || !session->is_open()) {
      it = followers_.erase(it);
      continue;
    }
    if (session->pending_output_bytes() > options_.max_follower_lag_bytes) {
      it = followers_.erase(it);
      session->close_for_error(
          fmt::format("follower is {} bytes behind (--max-follower-lag-bytes {}); dropping it: "
                      "that standby is no longer current",
                      session->pending_output_bytes(), options_.max_follower_lag_bytes));
      continue;
    }
    if (frame.empty()) frame = encode_replication_frame(++sequence_, mutation);
    session->send(frame);
    ++it;
  }
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
