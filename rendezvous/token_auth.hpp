#pragma once

// The job's token on the store: a challenge-response handshake (HMAC-SHA256, OpenSSL) that an
// agent runs on each new connection, and the store's access policy that keeps the rendezvous
// key space ("/ddprun/...") to connections that completed it. Workers never hold the token and
// keep full access to every other key. See docs/rendezvous.md, "The token".

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "rendezvous/access_policy.hpp"
#include "rendezvous/blocking_socket.hpp"

namespace ddp::rdzv {

// Wire keys (StoreClient's "/" prefix included).
inline constexpr std::string_view kRendezvousKeyPrefix = "/ddprun/";
inline constexpr std::string_view kAuthKeyPrefix = "/ddprun-auth/";
inline constexpr std::string_view kAuthChallengeKey = "/ddprun-auth/challenge";
inline constexpr std::string_view kAuthResponsePrefix = "/ddprun-auth/response/";
inline constexpr std::string_view kAuthAccepted = "ok";

// --- pure parts ---------------------------------------------------------------------------
std::string hmac_sha256_hex(std::string_view key, std::string_view message);
// 128 random bits from OpenSSL's CSPRNG, as 32 hex digits.
std::string new_challenge();
// What a connection sends to prove the token for `challenge`. Bound to the challenge, which the
// store never hands out twice, so a recorded response is worthless.
std::string challenge_response(std::string_view token, std::string_view challenge);
// Constant-time comparison of two secrets' texts.
bool same_secret(std::string_view a, std::string_view b);
// Keys only a connection that proved the token may touch: the rendezvous keys and the
// handshake's own keys.
bool is_protected_key(std::string_view wire_key);

// --- client side --------------------------------------------------------------------------
// Runs the handshake on a fresh connection (after VALIDATE + PING). Throws StoreAuthError when
// the store refuses the token or does not speak the handshake; StoreError when the link fails.
void prove_token(BlockingSocket& socket, std::string_view token,
                 BlockingSocket::Clock::time_point deadline);
// For StoreClientOptions::after_connect.
std::function<void(BlockingSocket&, BlockingSocket::Clock::time_point)> token_prover(
    std::string token);

// --- store side ---------------------------------------------------------------------------
// Answers the handshake; before it succeeds a connection may not name a protected key (it is
// closed), and LIST_KEYS / GET_NUM_KEYS leave those keys out. A wrong response closes the
// connection with a log line. A connection that has not proved the token may fill the store only
// up to (1 - 1/kReservedFraction) of --max-keys and --max-store-bytes: the rest is kept for the
// job's own keys, so a stranger filling the store cannot keep the job from forming.
class TokenAccessPolicy final : public AccessPolicy {
 public:
  static constexpr std::size_t kReservedFraction = 8;
  explicit TokenAccessPolicy(std::string token) : token_(std::move(token)) {}
  std::optional<Outcome> screen(const StoreModel& model, ClientId client, const Command& cmd,
                                const StoreLimits& limits) override;
  void forget(ClientId client) override { clients_.erase(client); }

 private:
  struct ClientState {
    std::string challenge;  // the one outstanding challenge; empty once used
    bool proven = false;
  };
  std::string token_;
  std::unordered_map<ClientId, ClientState> clients_;  // only clients that asked for a challenge
};

}  // namespace ddp::rdzv
