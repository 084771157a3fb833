#include "rendezvous/proxy/reply_reader.hpp"

#include <stdexcept>
#include <string>

#include "rendezvous/codec.hpp"

namespace ddp::rdzv::proxy {

ReplyShape reply_shape(Op op) {
  switch (op) {
    case Op::Validate:
    case Op::Set:
    case Op::Append:
    case Op::MultiSet:
    case Op::QueuePush:
      return ReplyShape::None;
    case Op::Check:
    case Op::Wait:
    case Op::Barrier:
    case Op::CancelWait:
    case Op::WatchKey:
    case Op::Tagged:
    case Op::Unwatch:
      return ReplyShape::Byte;
    case Op::Ping:
      return ReplyShape::Word;
    case Op::Add:
    case Op::GetNumKeys:
    case Op::DeleteKey:
    case Op::QueueLen:
      return ReplyShape::Number;
    case Op::Get:
    case Op::CompareSet:
      return ReplyShape::Bytes;
    case Op::MultiGet:
      return ReplyShape::BytesList;
    case Op::QueuePop:
      return ReplyShape::QueueItem;
    case Op::ListKeys:
      return ReplyShape::KeyList;
    case Op::Probe:
      return ReplyShape::Probe;
  }
  throw std::logic_error("reply_shape: unknown op");
}

namespace {

// Reads `count` length-prefixed strings from `pos`; returns the end, or nullopt if incomplete.
std::optional<std::size_t> strings_end(std::string_view buf, std::size_t pos, std::uint64_t count,
                                       std::size_t max_bytes) {
  std::size_t total = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (buf.size() < pos + 8) return std::nullopt;
    const std::uint64_t len = get_u64(buf.data() + pos);
    total += len;
    if (len > max_bytes || total > max_bytes) {
      throw std::length_error("upstream reply of " + std::to_string(len) + " bytes exceeds limit " +
                              std::to_string(max_bytes));
    }
    pos += 8;
    if (buf.size() < pos + len) return std::nullopt;
    pos += static_cast<std::size_t>(len);
  }
  return pos;
}

}  // namespace

std::optional<std::size_t> complete_reply_size(ReplyShape shape, std::size_t count,
                                               std::string_view buf, std::size_t max_bytes) {
  switch (shape) {
    case ReplyShape::None:
      return 0;
    case ReplyShape::Byte:
      return buf.size() >= 1 ? std::optional<std::size_t>(1) : std::nullopt;
    case ReplyShape::Word:
      return buf.size() >= 4 ? std::optional<std::size_t>(4) : std::nullopt;
    case ReplyShape::Number:
      return buf.size() >= 8 ? std::optional<std::size_t>(8) : std::nullopt;
    case ReplyShape::Bytes:
      return strings_end(buf, 0, 1, max_bytes);
    case ReplyShape::BytesList:
      return strings_end(buf, 0, count, max_bytes);
    case ReplyShape::QueueItem: {
      if (buf.size() < 8) return std::nullopt;
      if (get_i64(buf.data()) <= 0) return 8;
      return strings_end(buf, 8, 1, max_bytes);
    }
    case ReplyShape::KeyList: {
      if (buf.size() < 8) return std::nullopt;
      const std::uint64_t n = get_u64(buf.data());
      if (n > max_bytes / 8)
        throw std::length_error("upstream LIST_KEYS count " + std::to_string(n) + " too large");
      return strings_end(buf, 8, n, max_bytes);
    }
    case ReplyShape::Probe:
      return buf.size() >= 1 + count ? std::optional<std::size_t>(1 + count) : std::nullopt;
  }
  return std::nullopt;
}

std::optional<TaggedMessage> parse_tagged_message(std::string_view buf,
                                                  std::optional<ExpectedReply> next,
                                                  std::size_t max_bytes) {
  if (buf.empty()) return std::nullopt;
  const auto tag = static_cast<std::uint8_t>(buf[0]);
  const std::string_view body = buf.substr(1);
  TaggedMessage m;
  if (tag == kTagReply) {
    if (!next) throw std::runtime_error("a tagged reply with no request in flight");
    const auto size = complete_reply_size(next->shape, next->count, body, max_bytes);
    if (!size) return std::nullopt;
    m.kind = TaggedMessage::Kind::Reply;
    m.size = 1 + *size;
    m.reply = body.substr(0, *size);
    return m;
  }
  if (tag != kTagEvent) throw std::runtime_error("unknown tag " + std::to_string(tag));
  if (body.empty()) return std::nullopt;
  const auto type = static_cast<std::uint8_t>(body[0]);
  if (type > static_cast<std::uint8_t>(WatchEventType::KeyDeleted))
    throw std::runtime_error("unknown watch event type " + std::to_string(type));
  const auto end = strings_end(body, 1, 1, max_bytes);
  if (!end) return std::nullopt;
  m.kind = TaggedMessage::Kind::Event;
  m.size = 1 + *end;
  m.type = static_cast<WatchEventType>(type);
  m.key = body.substr(1 + 8, *end - 1 - 8);
  return m;
}

}  // namespace ddp::rdzv::proxy
