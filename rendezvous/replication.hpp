#pragma once

// The replication protocol between a primary store and its standby (`ddprun-store --follow`),
// as pure functions: which requests are mutations, the form in which they travel, the frames
// and the reserved keys. See docs/scale.md ("Standby store").
//
// A follower opens an ordinary G2 connection to the primary (VALIDATE, PING) and GETs
// kFollowKey; the reply is the primary's epoch (decimal). From then on the primary sends, on
// that connection, one frame per mutation in the order it applied them: u64 sequence number
// (1, 2, ...) followed by the mutation as a G2 request. The first frames are a snapshot of the
// state at subscription time: a SET per key, then a QUEUE_PUSH per queue item (each queue's
// items head first). The standby acknowledges what it applied with SET kAckKey = the last
// sequence number (decimal), on the same connection; the primary holds every client's output
// that may reveal a mutation until its standby acknowledged it (synchronous replication). A
// promoted standby sends one SET of kFenceKey = its epoch back on the same connection before
// closing it: a primary that reads it steps down.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/codec.hpp"
#include "rendezvous/store_model.hpp"

namespace ddp::rdzv {

// Reserved keys, in the form PyTorch's clients send them (they prepend '/'). With the job's token
// only a connection that proved it may name a key under kReplicationKeyPrefix (token_auth.hpp).
inline constexpr std::string_view kReplicationKeyPrefix = "/ddprun.replication/";
inline constexpr std::string_view kFollowKey = "/ddprun.replication/follow";
inline constexpr std::string_view kPromoteKey = "/ddprun.replication/promote";
inline constexpr std::string_view kFenceKey = "/ddprun.replication/fence";
inline constexpr std::string_view kAckKey = "/ddprun.replication/ack";
// The last frame a primary sends a follower it drops (lag, acknowledgement timeout): SET of this
// key, the reason as its value. The standby then knows it is no longer current and refuses
// promotion (its state may lack acknowledged writes).
inline constexpr std::string_view kDroppedKey = "/ddprun.replication/dropped";

// The mutation to send to followers for `cmd`, or nullopt when `cmd` changes nothing that
// outlives its connection (reads, WAIT, watches, PING). BARRIER travels as ADD key 1: the
// counter is state, the waiting client is not.
std::optional<Command> replicated_form(const Command& cmd);

std::string encode_replication_frame(std::uint64_t sequence, const Command& mutation);

// The snapshot frames for `model`, numbered from `sequence` + 1; `sequence` ends at the last one.
struct ReplicationSnapshot {
  std::string frames;
  std::size_t keys = 0;
  std::size_t queue_items = 0;
};
ReplicationSnapshot encode_snapshot(const StoreModel& model, std::uint64_t& sequence);

// The standby's acknowledgement of every frame up to `sequence` (a G2 SET of kAckKey).
std::string encode_acknowledgement(std::uint64_t sequence);
// The sequence number an acknowledgement carries, or nullopt when it is not a decimal number.
std::optional<std::uint64_t> parse_sequence(std::string_view text);

struct ReplicationFrame {
  std::uint64_t sequence = 0;
  Command mutation;
};

// Decodes a follower's incoming byte stream into frames, bounded by `limits` like any request.
class ReplicationFrameParser {
 public:
  explicit ReplicationFrameParser(const StoreLimits& limits) : limits_(limits) {}
  void append(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete frame, nullopt when more bytes are needed; throws std::runtime_error on a
  // malformed frame.
  std::optional<ReplicationFrame> next();
  std::size_t buffered_bytes() const { return buffer_.size() - offset_; }

 private:
  StoreLimits limits_;
  std::string buffer_;
  std::size_t offset_ = 0;
};

// What a standby serves before promotion, whatever its client proved: VALIDATE, PING, the
// promotion (COMPARE_SET of kPromoteKey) and, when `handshake`, a request of the access policy's
// proof (AccessPolicy::is_handshake). Anything else (reads of its possibly stale state included)
// is refused before the access policy sees it.
bool standby_admits(const Command& cmd, bool handshake);

// A PROMOTE proposal is COMPARE_SET(kPromoteKey, "", "<epoch>"): the epoch it carries, or
// nullopt when the text is not a positive decimal number.
std::optional<std::int64_t> parse_epoch(std::string_view text);

}  // namespace ddp::rdzv
