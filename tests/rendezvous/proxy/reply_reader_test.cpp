// Framing of the root's replies on the proxy's pipelined link (pure).
#include <doctest/doctest.h>

#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/codec.hpp"
#include "rendezvous/proxy/reply_reader.hpp"

using namespace ddp::rdzv;
using namespace ddp::rdzv::proxy;

TEST_CASE("each op's reply shape") {
  CHECK(reply_shape(Op::Set) == ReplyShape::None);
  CHECK(reply_shape(Op::MultiSet) == ReplyShape::None);
  CHECK(reply_shape(Op::Wait) == ReplyShape::Byte);
  CHECK(reply_shape(Op::Ping) == ReplyShape::Word);
  CHECK(reply_shape(Op::Add) == ReplyShape::Number);
  CHECK(reply_shape(Op::Get) == ReplyShape::Bytes);
  CHECK(reply_shape(Op::MultiGet) == ReplyShape::BytesList);
  CHECK(reply_shape(Op::QueuePop) == ReplyShape::QueueItem);
  CHECK(reply_shape(Op::ListKeys) == ReplyShape::KeyList);
  CHECK(reply_shape(Op::Tagged) == ReplyShape::Byte);
  CHECK(reply_shape(Op::Unwatch) == ReplyShape::Byte);
  CHECK(reply_shape(Op::Probe) == ReplyShape::Probe);
}

TEST_CASE("a reply is complete only when all its bytes are there, wherever the split falls") {
  std::string two;
  put_bytes(two, "abc");
  put_bytes(two, "");
  const std::size_t limit = 1 << 20;
  for (std::size_t cut = 0; cut < two.size(); ++cut) {
    CHECK_FALSE(
        complete_reply_size(ReplyShape::BytesList, 2, std::string_view(two).substr(0, cut), limit));
  }
  CHECK(complete_reply_size(ReplyShape::BytesList, 2, two + "next", limit) == two.size());
  CHECK(complete_reply_size(ReplyShape::Bytes, 1, two, limit) == 11);
  CHECK(complete_reply_size(ReplyShape::None, 0, "", limit) == 0);
  CHECK_FALSE(complete_reply_size(ReplyShape::Number, 0, "1234567", limit));
  CHECK(complete_reply_size(ReplyShape::Number, 0, "12345678x", limit) == 8);
}

TEST_CASE("QUEUE_POP: an empty queue is just the count, and LIST_KEYS is a count then keys") {
  std::string empty;
  put_i64(empty, 0);
  CHECK(complete_reply_size(ReplyShape::QueueItem, 0, empty, 1 << 20) == 8);
  std::string item = empty;
  item.clear();
  put_i64(item, 2);
  put_bytes(item, "it");
  CHECK(complete_reply_size(ReplyShape::QueueItem, 0, item, 1 << 20) == item.size());
  std::string keys;
  put_u64(keys, 2);
  put_bytes(keys, "a");
  CHECK_FALSE(complete_reply_size(ReplyShape::KeyList, 0, keys, 1 << 20));
  put_bytes(keys, "b");
  CHECK(complete_reply_size(ReplyShape::KeyList, 0, keys, 1 << 20) == keys.size());
}

TEST_CASE("a length beyond the limit is refused before anything waits for it") {
  std::string huge;
  put_u64(huge, std::uint64_t{1} << 40);
  CHECK_THROWS_AS(complete_reply_size(ReplyShape::Bytes, 1, huge, 1 << 20), std::length_error);
  CHECK_THROWS_AS(complete_reply_size(ReplyShape::KeyList, 0, huge, 1 << 20), std::length_error);
}

namespace {

// What a tagged stream holds, as the reader of the main link sees it.
struct Seen {
  bool event = false;
  std::string bytes;  // the reply, or the event's key
  bool operator==(const Seen&) const = default;
};

// Consumes every whole message at the start of `buf`; the requests in flight are `expected`.
void read_tagged(std::string& buf, std::deque<ExpectedReply>& expected, std::vector<Seen>& seen) {
  for (;;) {
    std::optional<ExpectedReply> next;
    if (!expected.empty()) next = expected.front();
    auto m = parse_tagged_message(buf, next, 1 << 20);
    if (!m) return;
    if (m->kind == TaggedMessage::Kind::Reply) {
      expected.pop_front();
      seen.push_back(Seen{false, std::string(m->reply)});
    } else {
      seen.push_back(Seen{true, std::string(m->key)});
    }
    buf.erase(0, m->size);
  }
}

}  // namespace

TEST_CASE("tagged main link: replies and notifications told apart, split at every byte") {
  // As ddprun-store writes them: the tag, then the reply or the key-only notification.
  std::string get_reply;
  put_bytes(get_reply, "value");
  const std::string probe_reply("\x04\x01\x00", 3);
  std::string stream;
  stream += std::string(1, static_cast<char>(kTagReply)) + get_reply;
  stream += std::string(1, static_cast<char>(kTagEvent)) +
            encode_key_event(WatchEventType::KeyCreated, "/k");
  stream += std::string(1, static_cast<char>(kTagReply)) + probe_reply;
  stream += std::string(1, static_cast<char>(kTagEvent)) +
            encode_key_event(WatchEventType::KeyDeleted, "/other");
  stream += std::string(1, static_cast<char>(kTagReply)) + std::string(1, '\x03');
  const std::vector<Seen> want = {{false, get_reply},
                                  {true, "/k"},
                                  {false, probe_reply},
                                  {true, "/other"},
                                  {false, std::string(1, '\x03')}};
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    std::deque<ExpectedReply> expected = {
        {ReplyShape::Bytes, 1}, {ReplyShape::Probe, 2}, {reply_shape(Op::WatchKey), 1}};
    std::vector<Seen> seen;
    std::string buf = stream.substr(0, cut);
    read_tagged(buf, expected, seen);
    buf += stream.substr(cut);
    read_tagged(buf, expected, seen);
    CHECK(seen == want);
    CHECK(buf.empty());
    CHECK(expected.empty());
  }
}

TEST_CASE("tagged main link: bytes no ddprun-store sends are errors") {
  const std::size_t limit = 1 << 10;
  const std::optional<ExpectedReply> byte = ExpectedReply{ReplyShape::Byte, 0};
  CHECK_THROWS_AS(parse_tagged_message(std::string(1, '\x07'), byte, limit), std::runtime_error);
  // A reply nobody asked for.
  CHECK_THROWS_AS(parse_tagged_message(std::string("\x00\x01", 2), std::nullopt, limit),
                  std::runtime_error);
  // An event type past KEY_DELETED.
  CHECK_THROWS_AS(parse_tagged_message(std::string("\x01\x03", 2), byte, limit),
                  std::runtime_error);
  // A key length over the limit, refused from its header.
  std::string huge("\x01\x01", 2);
  put_u64(huge, std::uint64_t{1} << 40);
  CHECK_THROWS_AS(parse_tagged_message(huge, byte, limit), std::length_error);
  // Incomplete is not an error.
  CHECK_FALSE(parse_tagged_message(std::string(1, '\x00'), byte, limit));
  CHECK_FALSE(parse_tagged_message(std::string(1, '\x01'), std::nullopt, limit));
}
