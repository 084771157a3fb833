// The replication protocol's pure parts: which requests travel to followers, and the frames.

#include <doctest/doctest.h>

#include <stdexcept>

#include "rendezvous/command_handler.hpp"
#include "rendezvous/replication.hpp"

using namespace ddp::rdzv;

TEST_CASE("replication: mutations travel, reads and waits do not, BARRIER travels as ADD 1") {
  CHECK(replicated_form(Command{Op::Set, {"/k"}, {"v"}, 0, 0}).has_value());
  CHECK(replicated_form(Command{Op::QueuePop, {"/q"}, {}, 0, 0}).has_value());
  CHECK_FALSE(replicated_form(Command{Op::Get, {"/k"}, {}, 0, 0}).has_value());
  CHECK_FALSE(replicated_form(Command{Op::Wait, {"/k"}, {}, 0, 0}).has_value());
  CHECK_FALSE(replicated_form(Command{Op::Ping, {}, {}, 0, 7}).has_value());
  const auto barrier = replicated_form(Command{Op::Barrier, {"/b"}, {}, 64, 0});
  REQUIRE(barrier.has_value());
  CHECK(*barrier == Command{Op::Add, {"/b"}, {}, 1, 0});
}

TEST_CASE("replication: frames round-trip in order however the bytes are split") {
  const Command a{Op::Set, {"/a"}, {std::string(1000, 'x')}, 0, 0};
  const Command b{Op::Add, {"/n"}, {}, -3, 0};
  const std::string bytes = encode_replication_frame(41, a) + encode_replication_frame(42, b);
  ReplicationFrameParser parser{StoreLimits{}};
  std::vector<ReplicationFrame> got;
  for (char c : bytes) {  // one byte at a time
    parser.append(std::string_view(&c, 1));
    while (auto f = parser.next()) got.push_back(std::move(*f));
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].sequence == 41);
  CHECK(got[0].mutation == a);
  CHECK(got[1].sequence == 42);
  CHECK(got[1].mutation == b);
  CHECK(parser.buffered_bytes() == 0);
}

TEST_CASE("replication: a malformed frame is an error, an oversize one too") {
  ReplicationFrameParser parser{StoreLimits{}};
  std::string bad;
  put_u64(bad, 1);
  bad += static_cast<char>(0x7f);  // no such G2 opcode
  parser.append(bad);
  CHECK_THROWS_AS(parser.next(), std::runtime_error);
  StoreLimits small;
  small.max_value_bytes = 10;
  ReplicationFrameParser bounded{small};
  bounded.append(
      encode_replication_frame(1, Command{Op::Set, {"/k"}, {std::string(11, 'v')}, 0, 0}));
  CHECK_THROWS_AS(bounded.next(), std::runtime_error);
}

TEST_CASE("replication: epochs are positive decimals") {
  CHECK(parse_epoch("2") == 2);
  CHECK_FALSE(parse_epoch("").has_value());
  CHECK_FALSE(parse_epoch("0").has_value());
  CHECK_FALSE(parse_epoch("-1").has_value());
  CHECK_FALSE(parse_epoch("2x").has_value());
}

TEST_CASE("replication: a standby admits VALIDATE, PING, the promotion and a policy's proof only") {
  CHECK(standby_admits(Command{Op::Validate, {}, {}, 0, 0x3C85F7CE}, false));
  CHECK(standby_admits(Command{Op::Ping, {}, {}, 0, 7}, false));
  CHECK(
      standby_admits(Command{Op::CompareSet, {std::string(kPromoteKey)}, {"", "2"}, 0, 0}, false));
  CHECK(standby_admits(Command{Op::Get, {"/ddprun-auth/challenge"}, {}, 0, 0}, true));
  // Reads of its possibly stale state, whatever the client proved.
  for (Op op : {Op::ListKeys, Op::GetNumKeys}) {
    CHECK_FALSE(standby_admits(Command{op, {}, {}, 0, 0}, false));
  }
  CHECK_FALSE(standby_admits(Command{Op::Get, {"/k"}, {}, 0, 0}, false));
  CHECK_FALSE(standby_admits(Command{Op::Check, {"/k"}, {}, 0, 0}, false));
  CHECK_FALSE(standby_admits(Command{Op::QueueLen, {"/q"}, {}, 0, 0}, false));
  CHECK_FALSE(standby_admits(Command{Op::Set, {"/k"}, {"v"}, 0, 0}, false));
  CHECK_FALSE(standby_admits(
      Command{Op::CompareSet, {"/ddprun.replication/other"}, {"", "2"}, 0, 0}, false));
  CHECK_FALSE(standby_admits(Command{Op::Get, {std::string(kFollowKey)}, {}, 0, 0}, false));
}

TEST_CASE("replication: the snapshot is every key, then every queue's items head first") {
  StoreModel primary;
  Effects fx;
  primary.queue_push("/q", "a", fx);
  primary.queue_push("/q", "b", fx);
  primary.queue_push("/q", "c", fx);
  std::int64_t length_before = 0;
  CHECK(primary.queue_pop("/q", length_before) == "a");  // popped before the snapshot: not in it
  primary.queue_push("/other", "x", fx);
  primary.append("/k", "v", fx);
  std::uint64_t sequence = 41;
  const ReplicationSnapshot snapshot = encode_snapshot(primary, sequence);
  CHECK(snapshot.keys == 1);
  CHECK(snapshot.queue_items == 3);
  CHECK(sequence == 45);
  // Applied in order to an empty standby model, as StoreFollower does.
  StoreModel standby;
  ReplicationFrameParser parser{StoreLimits{}};
  parser.append(snapshot.frames);
  std::uint64_t expected = 42;
  while (auto frame = parser.next()) {
    CHECK(frame->sequence == expected++);
    const Outcome out =
        handle_command(standby, 1, Generation::G2, std::move(frame->mutation), false);
    CHECK_FALSE(out.close_reason.has_value());
  }
  CHECK(expected == 46);
  REQUIRE(standby.get("/k") != nullptr);
  CHECK(*standby.get("/k") == "v");
  CHECK(standby.queue_len("/q") == 2);
  CHECK(standby.queue_pop("/q", length_before) == "b");
  CHECK(standby.queue_pop("/q", length_before) == "c");
  CHECK(standby.queue_pop("/other", length_before) == "x");
  CHECK(standby.key_count() == 1);  // the queues are gone once popped
}

TEST_CASE("replication: an acknowledgement is a SET of the ack key carrying a decimal sequence") {
  const std::string ack = encode_acknowledgement(12345);
  StoreLimits limits;
  DecodeResult r = decode_request(ack, Generation::G2, limits);
  REQUIRE(r.status == DecodeStatus::Ok);
  CHECK(r.command.op == Op::Set);
  CHECK(r.command.keys == std::vector<std::string>{std::string(kAckKey)});
  CHECK(parse_sequence(r.command.values.at(0)) == 12345u);
  CHECK(parse_sequence("0") == 0u);
  CHECK_FALSE(parse_sequence(""));
  CHECK_FALSE(parse_sequence("-1"));
  CHECK_FALSE(parse_sequence("12x"));
  CHECK_FALSE(parse_sequence("99999999999999999999999"));
}
