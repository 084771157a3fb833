#pragma once

// The store server's side of replication (see rendezvous/replication.hpp for the protocol):
// a primary streams every mutation to its followers; a standby applies the primary's stream,
// answers nothing but VALIDATE/PING until promoted, and is promoted by one COMPARE_SET of
// kPromoteKey carrying a higher epoch; a primary told by its promoted standby that a higher
// epoch exists steps down (fenced) and refuses every request from then on.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/blocking_socket.hpp"
#include "rendezvous/codec.hpp"
#include "rendezvous/store_model.hpp"

namespace ddp::rdzv {

class StoreSession;
class StoreFollower;

struct ReplicationOptions {
  std::string follow;      // HOST:PORT of the primary: start as its standby ("" = primary)
  std::int64_t epoch = 1;  // this store's epoch while primary (a promotion must exceed it)
  // Frames owed to one follower that does not keep up: past this the follower is dropped (with a
  // log line) instead of growing the primary's memory.
  std::size_t max_follower_lag_bytes = std::size_t{64} * 1024 * 1024;
  // A follower that owes an acknowledgement for this long is dropped (with a log line), so a
  // stalled standby holds clients' replies at most this long: keep it below the agents'
  // heartbeat timeout, which would otherwise take the stall for the store's loss.
  std::chrono::milliseconds ack_timeout{2000};
  // A dropped follower gets this long to read what it was owed and the notice that it was
  // dropped (and to close its side); one that does not (stopped, its host gone) is reset and
  // may then not know.
  std::chrono::milliseconds dropped_drain_timeout{10000};
  // Standby: runs on the connection to the primary after VALIDATE + PING, before subscribing,
  // bounded by the subscription's deadline; throws (StoreAuthError) to refuse. The job's token:
  // token_prover(token) (token_auth.hpp), as an agent's StoreClientOptions::after_connect.
  std::function<void(BlockingSocket&, BlockingSocket::Clock::time_point)> after_connect;
};

class ReplicationHub {
 public:
  enum class Role { Primary, Standby, Fenced };

  explicit ReplicationHub(ReplicationOptions options)
      : options_(std::move(options)), epoch_(options_.epoch) {}

  // What the server needs from its owner: close every other connection when fenced.
  using CloseAll = std::function<void(const std::string& reason)>;

  // Checked before any access policy: a standby refuses (closes the connection of) every request
  // standby_admits() does not let through, a fenced store every request, whatever the client
  // proved. `handshake`: the access policy's AccessPolicy::is_handshake(cmd). true: refused.
  bool refuse_by_role(StoreSession& session, const Command& cmd, bool handshake);
  // Requests replication answers itself (subscribe, promote, fence) or refuses by role. true:
  // `cmd` was consumed here (replied to, or its connection closed).
  bool intercept(StoreSession& session, const Command& cmd, StoreModel& model,
                 const CloseAll& close_all);
  // Called once a mutation was applied, before its reply is written (so a primary that dies
  // after replying has already handed the frame to the kernel).
  void publish(const Command& mutation);
  bool has_followers() const { return !followers_.empty(); }
  // Followers, or dropped ones still being closed: next_ack_deadline() may say when to look.
  bool has_deadlines() const { return !followers_.empty() || !closing_.empty(); }
  void follower_closed(ClientId id);

  // Synchronous replication: output to `client` sent now waits until every follower
  // acknowledged this sequence number; 0 when nothing is unacknowledged (or `client` is a
  // follower).
  std::uint64_t output_gate(ClientId client) const {
    if (acknowledged_ == sequence_ || followers_.contains(client)) return 0;
    return sequence_;
  }
  // What the followers acknowledged advanced to `acknowledged` (or the last lagging one left):
  // the server releases output held behind it.
  using Released = std::function<void(std::uint64_t acknowledged)>;
  void on_released(Released released) { released_ = std::move(released); }
  // The earliest time a follower that owes an acknowledgement must be dropped, or a dropped one
  // still being closed must be reset, if any.
  std::optional<std::chrono::steady_clock::time_point> next_ack_deadline() const;
  // Drops every follower whose acknowledgement is overdue at `now` (with a log line), and resets
  // dropped ones that did not take their last frames within options().dropped_drain_timeout.
  void drop_overdue_followers(std::chrono::steady_clock::time_point now);

  // Standby: subscribe to options().follow now (blocking connect, handshake, after_connect;
  // throws std::runtime_error naming the primary and the reason), then apply its stream on `io`.
  void start_following(boost::asio::io_context& io, const StoreLimits& limits, StoreModel& model);
  void stop();

  Role role() const { return role_; }
  std::int64_t epoch() const { return epoch_; }
  const ReplicationOptions& options() const { return options_; }

 private:
  void subscribe(StoreSession& session, StoreModel& model);
  void promote(StoreSession& session, const Command& cmd);
  void acknowledge(StoreSession& session, const Command& cmd);
  // Tells a follower it is dropped (kDroppedKey) after what it is still owed, and closes its
  // connection once it took everything (within options().dropped_drain_timeout), with `reason`
  // logged.
  void drop(StoreSession& session, const std::string& reason);
  void end_overdue_closings(std::chrono::steady_clock::time_point now);
  // Recomputes acknowledged_ (the least of the followers'; sequence_ with none) and releases
  // held output when it advanced.
  void update_acknowledged();

  struct Follower {
    std::weak_ptr<StoreSession> session;
    std::uint64_t acknowledged = 0;
    // Since when it owes an acknowledgement (set when it was caught up and a frame was sent,
    // or when an acknowledgement left it still behind).
    std::chrono::steady_clock::time_point owing_since{};
  };

  ReplicationOptions options_;
  Role role_ = Role::Primary;
  std::int64_t epoch_;
  std::uint64_t sequence_ = 0;      // last frame sent
  std::uint64_t acknowledged_ = 0;  // by every follower (== sequence_ when none is behind)
  std::unordered_map<ClientId, Follower> followers_;
  // Dropped followers whose connection closes once they have read their notice.
  struct Closing {
    std::weak_ptr<StoreSession> session;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<Closing> closing_;
  Released released_;
  std::shared_ptr<StoreFollower> link_;  // standby: the connection to the primary
};

}  // namespace ddp::rdzv
