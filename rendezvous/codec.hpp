#pragma once

// Incremental, bounded request decoder and the matching encoders for both protocol
// generations. Pure functions over byte buffers: no sockets, no allocation before a length has
// been checked against StoreLimits.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/protocol.hpp"
#include "rendezvous/store_limits.hpp"

namespace ddp::rdzv {

// One decoded request. Which fields are used depends on `op`:
//   keys:   SET/GET/ADD/... one key; CHECK/WAIT/MULTI_GET/MULTI_SET n keys
//   values: SET/APPEND/QUEUE_PUSH one value; COMPARE_SET {expected, desired}; MULTI_SET n values
//   number: ADD delta, BARRIER world size
//   word:   VALIDATE magic, PING nonce, TAGGED version
struct Command {
  Op op = Op::Set;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t number = 0;
  std::uint32_t word = 0;

  bool operator==(const Command&) const = default;
};

enum class DecodeStatus { NeedMore, Ok, Bad };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::NeedMore;
  std::size_t consumed = 0;  // Ok: bytes of the buffer this request used
  // NeedMore: no progress is possible before the buffer holds at least this many bytes (lengths
  // already checked against the limits), so a caller can skip re-parsing until then.
  std::size_t need_total = 0;
  Command command;    // valid when Ok
  std::string error;  // Bad: one line naming what was wrong
};

// Incremental decoder for one connection's request stream. Bytes are fed as they arrive and
// copied once, straight into the request being built, so a frame costs time linear in its size
// however it is segmented (nothing is re-parsed from the frame's start). Every length is
// checked against `limits` before anything is reserved for it, and memory grows only with the
// bytes actually received.
class RequestDecoder {
 public:
  // The fields an op's request is made of, in wire order.
  enum class Token : std::uint8_t { Word, Number, Key, Value, KeyList, PairList };

  RequestDecoder(Generation gen, const StoreLimits& limits) : gen_(gen), limits_(&limits) {}

  struct Step {
    DecodeStatus status = DecodeStatus::NeedMore;
    std::size_t consumed = 0;  // bytes of the input used by this call
  };
  // Consume `in` until a request is complete (Ok: collect it with take(); the rest of `in` is
  // unread), `in` is used up (NeedMore) or the request is malformed (Bad: see error(); the
  // decoder must not be fed again).
  Step feed(std::string_view in);
  // The request completed by the last Ok; the decoder is ready for the next one.
  Command take();

  const std::string& error() const { return error_; }
  // Bytes of an unfinished request held so far (0 between requests).
  std::size_t held_bytes() const { return held_; }
  bool mid_request() const { return phase_ != Phase::Opcode; }
  // The fewest further bytes that can let the current step finish (1 between requests).
  std::size_t still_needed() const;

 private:
  enum class Phase : std::uint8_t { Opcode, Scalar, Field, Done, Bad };
  enum class ScalarFor : std::uint8_t { Word, Number, FieldLength, Count };

  // Decode the request whose opcode is done from `in` at `pos` into cmd_ when it is whole there
  // and within the limits; false (cmd_ partly filled) otherwise.
  bool decode_whole(std::string_view in, std::size_t& pos);
  void next_token();
  void begin_scalar(std::size_t size, ScalarFor purpose);
  void begin_field(bool is_key);
  void scalar_done(const char* bytes);  // the scalar's bytes, complete
  void field_done();
  void list_item_done();
  void fail(std::string reason);

  Generation gen_;
  const StoreLimits* limits_;
  Phase phase_ = Phase::Opcode;
  Command cmd_;
  const Token* plan_ = nullptr;  // the op's fields in wire order
  std::size_t plan_size_ = 0;
  std::size_t token_ = 0;  // index into plan_ of the field being read
  char scalar_[8] = {};
  std::size_t scalar_have_ = 0;
  std::size_t scalar_size_ = 0;
  ScalarFor scalar_for_ = ScalarFor::Word;
  bool field_is_key_ = false;
  std::string* field_ = nullptr;  // destination of the field being read
  std::size_t field_left_ = 0;
  std::uint64_t list_left_ = 0;    // list items (keys or pairs) still to come
  bool pair_value_next_ = false;   // PairList: the key of the current pair has been read
  std::size_t request_bytes_ = 0;  // announced field bytes of this request
  std::size_t held_ = 0;
  std::string error_;
};

// Decode the request at the start of `buf`. Never reads past `buf`, never trusts a length beyond
// `limits`, and reports Bad for unknown opcodes and oversize fields as soon as the header shows it.
DecodeResult decode_request(std::string_view buf, Generation gen, const StoreLimits& limits);

// How a fresh connection identifies itself (rule from the protocol notes, section 4.4):
// first byte != 0 -> G1; 00 CE F7 85 3C -> G2 (VALIDATE); 00 followed by anything else -> G1 SET.
enum class ConnectionKind { Undetermined, G1, G2 };
ConnectionKind classify_connection(std::string_view first_bytes);

// --- encoding -------------------------------------------------------------------------------
// Integers are little-endian on the wire (every supported platform is little-endian and the
// reference implementations write native order).
void put_u8(std::string& out, std::uint8_t v);
void put_u32(std::string& out, std::uint32_t v);
void put_u64(std::string& out, std::uint64_t v);
void put_i64(std::string& out, std::int64_t v);
void put_bytes(std::string& out, std::string_view bytes);  // u64 length + bytes

// Little-endian loads (inline: the decoder does one per field).
inline std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);
  } else {
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  }
  return v;
}

inline std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);
  } else {
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  }
  return v;
}

inline std::int64_t get_i64(const char* p) { return static_cast<std::int64_t>(get_u64(p)); }

// Serialize `cmd` as `gen` speaks it. Throws std::invalid_argument when `gen` has no such op or
// the fields do not fit the op (e.g. MULTI_SET with unequal key and value counts).
std::string encode_request(Generation gen, const Command& cmd);

// G1 watch notification: u8 type | str key | bytes old | bytes new.
std::string encode_watch_event(WatchEventType type, std::string_view key,
                               std::string_view old_value, std::string_view new_value);

// The same change as a tagged connection gets it after its kTagEvent (docs/protocol.md, TAGGED):
// u8 type | str key. No values: the store proxy needs only the key and the type.
std::string encode_key_event(WatchEventType type, std::string_view key);

}  // namespace ddp::rdzv
