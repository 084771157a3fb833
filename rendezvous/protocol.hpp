#pragma once

// The c10d TCPStore wire vocabulary (see docs/protocol.md and the shared protocol notes).
// Two generations share bytes but not meanings: G1 = torch 1.13 (no handshake, WATCH_KEY),
// G2 = torch 2.x (VALIDATE + PING first, queues, LIST_KEYS, BARRIER).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ddp::rdzv {

enum class Generation : std::uint8_t { G1, G2 };

// Generation-neutral command identity; the wire byte depends on the generation.
enum class Op : std::uint8_t {
  Validate,
  Set,
  CompareSet,
  Get,
  Add,
  Check,
  Wait,
  GetNumKeys,
  WatchKey,
  DeleteKey,
  Append,
  MultiGet,
  MultiSet,
  CancelWait,
  Ping,
  QueuePush,
  QueuePop,
  QueueLen,
  ListKeys,
  Barrier,
  // ddprun extensions (ddprun-store only; docs/protocol.md). PROBE (G1 and G2): a reply that
  // cannot be mistaken for a watch notification, so it marks a point in a stream that carries
  // both. TAGGED and UNWATCH (G2 only): the store proxy's one root connection, whose every
  // message from the store is prefixed by a tag (reply or watch notification). WATCH_KEY exists
  // in G2 as an extension too, only on a tagged connection.
  Probe,
  Tagged,
  Unwatch,
};
inline constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::Unwatch) + 1;

// PROBE: G1 wire byte (unused by 1.13), `u64 n`, n x `str key`. Reply: kProbeReplyTag, then one
// byte per key in request order, 1 if the key exists, 0 if not. See docs/protocol.md.
inline constexpr std::uint8_t kG1ProbeWire = 0x40;
inline constexpr std::uint8_t kProbeReplyTag = 0x04;

// G2 wire bytes of the extensions (unused by torch 2.x, whose opcodes end at 18).
inline constexpr std::uint8_t kG2ProbeWire = 0x40;
inline constexpr std::uint8_t kG2TaggedWire = 0x41;    // `u32 version`; reply kTaggedOn
inline constexpr std::uint8_t kG2WatchKeyWire = 0x42;  // `str key`; reply 0x03 as in G1
inline constexpr std::uint8_t kG2UnwatchWire = 0x43;   // `str key`; reply 1 removed, 0 none
inline constexpr std::uint32_t kTaggedVersion = 1;
inline constexpr std::uint8_t kTaggedOn = 0x01;
// On a tagged connection every message from the store starts with one of these.
inline constexpr std::uint8_t kTagReply = 0x00;  // then the reply as on an untagged connection
inline constexpr std::uint8_t kTagEvent = 0x01;  // then `u8 WatchEventType | str key` (no values)

inline constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;  // sent little-endian: CE F7 85 3C

// Reply bytes.
inline constexpr std::uint8_t kCheckReady = 0x00;
inline constexpr std::uint8_t kCheckNotReady = 0x01;
inline constexpr std::uint8_t kStopWaiting = 0x00;
inline constexpr std::uint8_t kWaitCanceled = 0x01;

// G1 watch notification types (first byte of a notification frame).
enum class WatchEventType : std::uint8_t {
  KeyUpdated = 0,
  KeyCreated = 1,
  KeyDeleted = 2,
  CallbackRegistered = 3,
};

std::optional<Op> op_from_wire(Generation gen, std::uint8_t byte);
// Only valid for ops that exist in `gen` (has_op).
std::uint8_t wire_from_op(Generation gen, Op op);
bool has_op(Generation gen, Op op);
std::string_view op_name(Op op);
std::string_view generation_name(Generation gen);

}  // namespace ddp::rdzv
