#pragma once

// The store server's side of replication (see rendezvous/replication.hpp for the protocol):
// a primary streams every mutation to its followers; a standby applies the primary's stream,
// answers nothing but VALIDATE/PING until promoted, and is promoted by one COMPARE_SET of
// kPromoteKey carrying a higher epoch; a primary told by its promoted standby that a higher
// epoch exists steps down (fenced) and refuses every request from then on.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

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
  void follower_closed(ClientId id) { followers_.erase(id); }

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

  ReplicationOptions options_;
  Role role_ = Role::Primary;
  std::int64_t epoch_;
  std::uint64_t sequence_ = 0;  // last frame sent
  std::unordered_map<ClientId, std::weak_ptr<StoreSession>> followers_;
  std::shared_ptr<StoreFollower> link_;  // standby: the connection to the primary
};

}  // namespace ddp::rdzv
