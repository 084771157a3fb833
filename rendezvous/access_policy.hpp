#pragma once

// The store server's one extension point for access control: a policy screens each request
// before the command handler sees it. The server itself knows nothing about tokens; the policy
// that keeps ddprun's rendezvous keys to agents that proved the job's token lives in
// token_auth.hpp.

#include <optional>

#include "rendezvous/codec.hpp"
#include "rendezvous/command_handler.hpp"
#include "rendezvous/store_limits.hpp"
#include "rendezvous/store_model.hpp"

namespace ddp::rdzv {

class AccessPolicy {
 public:
  virtual ~AccessPolicy() = default;
  // Called for every request except a G2 connection's first (VALIDATE, checked by the handler).
  // nullopt lets the request through; an Outcome (an answer of the policy's own, or a close)
  // replaces the handler's. An answer of the policy's own keeps within `limits` as the handler
  // does.
  virtual std::optional<Outcome> screen(const StoreModel& model, ClientId client,
                                        const Command& cmd, const StoreLimits& limits) = 0;
  // The connection closed: drop what the policy kept about it.
  virtual void forget(ClientId client) = 0;
};

}  // namespace ddp::rdzv
