#pragma once

// When an agent must stop itself because etcd has (or may have) dropped its lease: etcd's own
// lease semantics, not the time since the last renewal. Pure (the caller passes the clock's
// time); the agent's keepalive thread feeds it one outcome per heartbeat.
//
// * etcd says the lease is gone (a keepalive answered TTL <= 0, or "lease not found"): fence now.
// * No member answered at all (nothing listens, nothing replies in time) for the granted TTL:
//   etcd may have dropped the lease meanwhile, fence.
// * Members answer but renew nothing (no leader, "request timed out" during an election): etcd
//   cannot expire a lease without a leader, and a new leader extends every lease by its TTL
//   (lessor.Promote), so this time does not count against the TTL. Bounded all the same: with no
//   renewal for `leaderless_bound` (3 x the TTL) quorum is taken for lost and the agent fences.

#include <chrono>
#include <optional>
#include <string>

namespace ddp::rdzv::etcd {

class LeaseFence {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Outcome {
    Renewed,     // a keepalive answered TTL > 0
    Gone,        // etcd says the lease no longer exists
    NotRenewed,  // a member of etcd answered, but nothing was renewed (no leader, busy)
    NoAnswer,    // no member of etcd answered at all
  };
  LeaseFence(std::chrono::seconds granted_ttl, Clock::time_point start);
  // One keepalive's outcome at `now`; the reason to fence (one line), or nullopt.
  std::optional<std::string> note(Outcome outcome, Clock::time_point now,
                                  const std::string& detail = {});
  std::chrono::seconds ttl() const { return ttl_; }
  Clock::duration leaderless_bound() const { return 3 * ttl_; }

 private:
  std::chrono::seconds ttl_;
  Clock::time_point renewed_;   // the last renewal (or the grant)
  Clock::time_point answered_;  // the last time any member of etcd answered anything
};

}  // namespace ddp::rdzv::etcd
