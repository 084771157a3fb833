// Framing of the root's replies on the proxy's pipelined link (pure).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

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
