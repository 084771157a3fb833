#pragma once

// Framing of the store's replies, for a client that pipelines requests on one connection (the
// store proxy's upstream side). Replies carry no opcode or length of their own: the request
// they answer decides their shape. Pure: no I/O.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "rendezvous/protocol.hpp"

namespace ddp::rdzv::proxy {

// What a request's reply looks like on the wire (G2 rules, the proxy's upstream dialect).
enum class ReplyShape : std::uint8_t {
  None,       // SET, APPEND, MULTI_SET, QUEUE_PUSH, VALIDATE
  Byte,       // CHECK, WAIT, BARRIER, CANCEL_WAIT, WATCH_KEY, TAGGED, UNWATCH
  Word,       // PING
  Number,     // ADD, GETNUMKEYS, DELETE_KEY, QUEUE_LEN
  Bytes,      // GET, COMPARE_SET
  BytesList,  // MULTI_GET: `count` values
  QueueItem,  // QUEUE_POP: i64 length before, then bytes when > 0
  KeyList,    // LIST_KEYS: i64 n, then n strings
  Probe,      // PROBE (ddprun extension): kProbeReplyTag, then `count` bytes
};

ReplyShape reply_shape(Op op);

// Bytes at the start of `buf` forming one complete reply of `shape` (`count` values for
// BytesList), nullopt while incomplete. A length field above `max_bytes` throws
// std::length_error (the upstream is not a store we can trust to follow the protocol).
std::optional<std::size_t> complete_reply_size(ReplyShape shape, std::size_t count,
                                               std::string_view buf, std::size_t max_bytes);

// Tagged mode (ddprun-store's TAGGED extension, docs/protocol.md): every message from the root
// starts with kTagReply, then the reply to the oldest request not answered, shaped as above, or
// kTagEvent, then a watch notification `u8 type | str key`. The messages of one connection are
// one ordered stream of points of the root's history.
struct ExpectedReply {
  ReplyShape shape = ReplyShape::None;
  std::size_t count = 0;  // BytesList / Probe: the request's key count
};
struct TaggedMessage {
  enum class Kind : std::uint8_t { Reply, Event } kind = Kind::Reply;
  std::size_t size = 0;    // the whole message, tag included
  std::string_view reply;  // Reply: the bytes after the tag (a view into the buffer)
  WatchEventType type = WatchEventType::KeyUpdated;  // Event
  std::string_view key;                              // Event (a view into the buffer)
};
// One message at the start of `buf`; nullopt while incomplete. `next`: the reply the oldest
// request in flight expects (none: a reply tag is an error). Throws std::runtime_error on bytes a
// ddprun-store would not send (unknown tag or event type, a reply nobody asked for) and
// std::length_error on a length above `max_bytes`.
std::optional<TaggedMessage> parse_tagged_message(std::string_view buf,
                                                  std::optional<ExpectedReply> next,
                                                  std::size_t max_bytes);

}  // namespace ddp::rdzv::proxy
