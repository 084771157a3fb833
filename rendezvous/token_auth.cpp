#include "rendezvous/token_auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

#include <fmt/format.h>

#include "rendezvous/codec.hpp"
#include "rendezvous/store_errors.hpp"

namespace ddp::rdzv {
namespace {

constexpr Generation kGen = Generation::G2;
constexpr std::size_t kChallengeBytes = 16;
constexpr std::size_t kMaxHandshakeReply = 256;

std::string to_hex(const unsigned char* data, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 0xF]);
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

Outcome close_with(std::string reason) {
  Outcome out;
  out.close_reason = std::move(reason);
  return out;
}

// Why an unproven connection's request would eat into the store's reserve, or nullopt. Counts a
// key as new when the store has no value under it (a queue's name counts as new: an upper bound).
std::optional<std::string> reserve_refusal(const StoreModel& model, const Command& cmd,
                                           const StoreLimits& limits) {
  switch (cmd.op) {
    case Op::Set:
    case Op::CompareSet:
    case Op::Add:
    case Op::Append:
    case Op::MultiSet:
    case Op::QueuePush:
    case Op::Barrier:
      break;
    default:
      return std::nullopt;
  }
  const std::size_t key_room =
      limits.max_keys - limits.max_keys / TokenAccessPolicy::kReservedFraction;
  const std::size_t byte_room =
      limits.max_store_bytes - limits.max_store_bytes / TokenAccessPolicy::kReservedFraction;
  std::size_t bytes = 0;
  for (const auto& k : cmd.keys) bytes += StoreModel::entry_bytes(k.size(), 0);
  for (const auto& v : cmd.values) bytes += v.size();
  if (model.held_bytes() + bytes > byte_room) {
    return fmt::format(
        "{} without the job's token would take the store past {} bytes (the rest "
        "is kept for the job)",
        op_name(cmd.op), byte_room);
  }
  if (model.key_count() + cmd.keys.size() <= key_room) return std::nullopt;
  std::size_t fresh = 0;
  for (const auto& k : cmd.keys) fresh += model.get(k) == nullptr ? 1 : 0;
  if (fresh == 0 || model.key_count() + fresh <= key_room) return std::nullopt;
  return fmt::format(
      "{} without the job's token would take the store past {} keys (the rest is "
      "kept for the job)",
      op_name(cmd.op), key_room);
}

Outcome reply_bytes(std::string_view bytes) {
  Outcome out;
  put_bytes(out.reply, bytes);
  return out;
}

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &length) == nullptr) {
    throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
  }
  return to_hex(mac, length);
}

std::string new_challenge() {
  unsigned char bytes[kChallengeBytes];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw std::runtime_error("OpenSSL RAND_bytes failed");
  return to_hex(bytes, sizeof bytes);
}

std::string challenge_response(std::string_view token, std::string_view challenge) {
  return hmac_sha256_hex(token, fmt::format("ddprun store access\n{}", challenge));
}

bool same_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool is_protected_key(std::string_view wire_key) {
  return starts_with(wire_key, kRendezvousKeyPrefix) || starts_with(wire_key, kAuthKeyPrefix);
}

void prove_token(BlockingSocket& socket, std::string_view token,
                 BlockingSocket::Clock::time_point deadline) {
  Command get{Op::Get, {std::string(kAuthChallengeKey)}, {}, 0, 0};
  socket.send_all(encode_request(kGen, get), deadline);
  std::string challenge;
  try {
    challenge = socket.recv_bytes(deadline, kMaxHandshakeReply);
  } catch (const StoreError& e) {
    throw StoreAuthError(
        fmt::format("the store did not answer ddprun's token challenge ({}); is it a ddprun "
                    "store started with the job's token?",
                    e.what()));
  }
  if (challenge.empty()) {
    throw StoreAuthError(
        "the store has no rendezvous token (it was started without one) but this node has one");
  }
  get.keys = {fmt::format("{}{}", kAuthResponsePrefix, challenge_response(token, challenge))};
  socket.send_all(encode_request(kGen, get), deadline);
  std::string verdict;
  try {
    verdict = socket.recv_bytes(deadline, kMaxHandshakeReply);
  } catch (const StoreError&) {
    throw StoreAuthError(
        "the store refused this node's rendezvous token (wrong or missing rendezvous token)");
  }
  if (verdict != kAuthAccepted)
    throw StoreAuthError(fmt::format("unexpected token verdict '{}'", verdict));
}

std::function<void(BlockingSocket&, BlockingSocket::Clock::time_point)> token_prover(
    std::string token) {
  return [token = std::move(token)](BlockingSocket& socket,
                                    BlockingSocket::Clock::time_point deadline) {
    prove_token(socket, token, deadline);
  };
}

std::optional<Outcome> TokenAccessPolicy::screen(const StoreModel& model, ClientId client,
                                                 const Command& cmd, const StoreLimits& limits) {
  if (cmd.op == Op::Get && cmd.keys.size() == 1) {
    const std::string& key = cmd.keys[0];
    if (key == kAuthChallengeKey) {
      ClientState& state = clients_[client];
      state.challenge = new_challenge();
      return reply_bytes(state.challenge);
    }
    if (starts_with(key, kAuthResponsePrefix)) {
      auto it = clients_.find(client);
      if (it == clients_.end() || it->second.challenge.empty())
        return close_with("token response without a challenge");
      const std::string expected = challenge_response(token_, it->second.challenge);
      it->second.challenge.clear();  // one guess per challenge
      if (!same_secret(std::string_view(key).substr(kAuthResponsePrefix.size()), expected)) {
        return close_with("wrong rendezvous token");
      }
      it->second.proven = true;
      return reply_bytes(kAuthAccepted);
    }
  }
  if (auto it = clients_.find(client); it != clients_.end() && it->second.proven)
    return std::nullopt;
  for (const auto& key : cmd.keys) {
    if (is_protected_key(key)) return close_with("rendezvous key without the job's token");
  }
  if (auto why = reserve_refusal(model, cmd, limits)) return close_with(std::move(*why));
  if (cmd.op == Op::ListKeys || cmd.op == Op::GetNumKeys) {
    // The same bound as the handler's LIST_KEYS (the filtered reply is never larger).
    if (cmd.op == Op::ListKeys && model.list_keys_bytes() > limits.max_reply_bytes) {
      return close_with(
          fmt::format("LIST_KEYS reply of {} bytes exceeds the reply limit of {} bytes",
                      model.list_keys_bytes(), limits.max_reply_bytes));
    }
    std::vector<std::string> visible;
    for (auto& key : model.list_keys()) {
      if (!is_protected_key(key)) visible.push_back(std::move(key));
    }
    Outcome out;
    put_i64(out.reply, static_cast<std::int64_t>(visible.size()));
    if (cmd.op == Op::ListKeys) {
      for (const auto& key : visible) put_bytes(out.reply, key);
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace ddp::rdzv
