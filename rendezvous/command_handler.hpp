#pragma once

// Turns one decoded request into a reply and side effects on the StoreModel, for a connection of
// a known generation. No I/O: the server writes `reply`, closes on `close_reason`, and delivers
// `effects` to the other connections.

#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/codec.hpp"
#include "rendezvous/store_limits.hpp"
#include "rendezvous/store_model.hpp"

namespace ddp::rdzv {

// How a connection frames what the store sends it: Plain (the c10d protocol) or Tagged (ddprun's
// TAGGED extension, docs/protocol.md: each message prefixed by kTagReply or kTagEvent).
enum class Framing : std::uint8_t { Plain, Tagged };

struct Outcome {
  std::string reply;                        // bytes to send back now (may be empty)
  std::optional<std::string> close_reason;  // set: drop the connection without replying
  Effects effects;                          // other clients to answer (wake-ups, notifications)
  bool tags_on = false;  // TAGGED accepted: tag this connection's messages from `reply` on
};

// `first_request` is true for the first request of the connection (G2: must be VALIDATE).
// Values are moved out of `cmd` into the store (a 100 MiB SET is not copied twice).
// Order of decisions: protocol state (VALIDATE first), then admission (the request fits the
// store's bounds in `limits`: reply size, value size after APPEND, key count, held bytes),
// then execution. A refused request closes its connection and changes nothing.
// `framing` is the connection's: TAGGED only on a Plain G2 connection, G2 WATCH_KEY and UNWATCH
// only on a Tagged one (a notification would desynchronise a plain G2 client).
Outcome handle_command(StoreModel& model, ClientId client, Generation gen, Command&& cmd,
                       bool first_request, const StoreLimits& limits = StoreLimits{},
                       Framing framing = Framing::Plain);

}  // namespace ddp::rdzv
