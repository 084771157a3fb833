#include <doctest/doctest.h>

#include <random>
#include <stdexcept>

#include "rendezvous/codec.hpp"
#include "tests/rendezvous/frames.hpp"

using namespace ddp::rdzv;
using ddp::rdzv::test::make;
using ddp::rdzv::test::sample_commands;

namespace {

std::string hex_bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

// Decode a byte stream that arrives in the given chunk sizes, the way a session does: keep a
// buffer, honour the need_total hint, decode every complete request.
std::vector<Command> decode_stream(const std::string& stream,
                                   const std::vector<std::size_t>& chunks, Generation gen,
                                   const StoreLimits& limits) {
  std::vector<Command> out;
  std::string buf;
  std::size_t fed = 0, need = 0;
  for (std::size_t chunk : chunks) {
    buf.append(stream, fed, chunk);
    fed += chunk;
    while (!buf.empty() && buf.size() >= need) {
      auto r = decode_request(buf, gen, limits);
      REQUIRE(r.status != DecodeStatus::Bad);
      if (r.status == DecodeStatus::NeedMore) {
        REQUIRE(r.need_total > buf.size());
        need = r.need_total;
        break;
      }
      out.push_back(r.command);
      buf.erase(0, r.consumed);
      need = 0;
    }
  }
  CHECK(buf.empty());
  return out;
}

}  // namespace

TEST_CASE("codec: G1 SET matches the captured 1.13 bytes") {
  const std::string wire = encode_request(Generation::G1, make(Op::Set, {"/k1"}, {"v1"}));
  CHECK(wire ==
        hex_bytes({0x00, 3, 0, 0, 0, 0, 0, 0, 0, '/', 'k', '1', 2, 0, 0, 0, 0, 0, 0, 0, 'v', '1'}));
  const std::string add = encode_request(Generation::G1, make(Op::Add, {"/cnt"}, {}, -2));
  CHECK(add == hex_bytes({0x03, 4,   0,    0,    0,    0,    0,    0,    0,    '/', 'c',
                          'n',  't', 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
}

TEST_CASE("codec: G2 VALIDATE and PING are the 2.x handshake bytes") {
  CHECK(encode_request(Generation::G2, make(Op::Validate, {}, {}, 0, kValidateMagic)) ==
        hex_bytes({0x00, 0xce, 0xf7, 0x85, 0x3c}));
  CHECK(encode_request(Generation::G2, make(Op::Ping, {}, {}, 0, 10079)) ==
        hex_bytes({0x0d, 0x5f, 0x27, 0x00, 0x00}));  // captured from torch 2.15, pid 10079
  CHECK(encode_request(Generation::G2, make(Op::Get, {"/k"}))[0] ==
        0x03);  // GET is 3 in G2, 2 in G1
  CHECK(encode_request(Generation::G1, make(Op::Get, {"/k"}))[0] == 0x02);
}

TEST_CASE("codec: every frame decodes whole, byte by byte and in random splits") {
  const StoreLimits limits;
  for (Generation gen : {Generation::G1, Generation::G2}) {
    CAPTURE(generation_name(gen));
    const auto commands = sample_commands(gen);
    std::string stream;
    for (const auto& cmd : commands) {
      CAPTURE(op_name(cmd.op));
      const std::string wire = encode_request(gen, cmd);
      stream += wire;
      auto whole = decode_request(wire, gen, limits);
      REQUIRE(whole.status == DecodeStatus::Ok);
      CHECK(whole.consumed == wire.size());
      CHECK(whole.command == cmd);
      // Every proper prefix is NeedMore, with a hint that neither overshoots nor stalls.
      for (std::size_t len = 0; len < wire.size(); ++len) {
        auto partial = decode_request(std::string_view(wire).substr(0, len), gen, limits);
        REQUIRE(partial.status == DecodeStatus::NeedMore);
        CHECK(partial.need_total > len);
        CHECK(partial.need_total <= wire.size());
      }
      // Trailing bytes of the next request are left alone.
      auto with_tail = decode_request(wire + "\x06", gen, limits);
      CHECK(with_tail.consumed == wire.size());
    }
    std::vector<std::size_t> ones(stream.size(), 1);
    CHECK(decode_stream(stream, ones, gen, limits) == commands);
    std::mt19937 rng(42);
    for (int round = 0; round < 50; ++round) {
      std::vector<std::size_t> chunks;
      for (std::size_t left = stream.size(); left > 0;) {
        std::size_t n = std::min<std::size_t>(left, 1 + rng() % 600);
        chunks.push_back(n);
        left -= n;
      }
      CHECK(decode_stream(stream, chunks, gen, limits) == commands);
    }
  }
}

TEST_CASE("codec: unknown opcodes are Bad for their generation") {
  const StoreLimits limits;
  for (int b : {0x09, 0x0a, 0x0d, 0x13, 0xff}) {
    auto r = decode_request(std::string(1, static_cast<char>(b)), Generation::G1, limits);
    CHECK(r.status == DecodeStatus::Bad);
    CHECK(r.error.find("unknown G1 opcode") != std::string::npos);
  }
  for (int b : {0x13, 0x7f, 0xff}) {
    auto r = decode_request(std::string(1, static_cast<char>(b)), Generation::G2, limits);
    CHECK(r.status == DecodeStatus::Bad);
  }
}

TEST_CASE("codec: oversize lengths are Bad before the bytes arrive") {
  StoreLimits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 32;
  limits.max_keys_per_request = 4;
  limits.max_request_bytes = 100;
  auto header_only = [](std::uint8_t op, std::uint64_t len) {
    std::string s(1, static_cast<char>(op));
    put_u64(s, len);
    return s;
  };
  SUBCASE("key") {
    auto r = decode_request(header_only(0x02, 17), Generation::G1, limits);
    CHECK(r.status == DecodeStatus::Bad);
    CHECK(r.error == "G1 GET: key length 17 exceeds limit 16");
    CHECK(decode_request(header_only(0x02, 16), Generation::G1, limits).status ==
          DecodeStatus::NeedMore);
  }
  SUBCASE("huge length never allocates") {
    auto r = decode_request(header_only(0x00, ~std::uint64_t{0}), Generation::G1, limits);
    CHECK(r.status == DecodeStatus::Bad);
  }
  SUBCASE("value") {
    std::string s = header_only(0x01, 1) + "k";  // G2 SET
    put_u64(s, 33);
    auto r = decode_request(s, Generation::G2, limits);
    CHECK(r.status == DecodeStatus::Bad);
    CHECK(r.error.find("value length 33 exceeds limit 32") != std::string::npos);
  }
  SUBCASE("key count") {
    auto r = decode_request(header_only(0x06, 5), Generation::G2, limits);  // WAIT with 5 keys
    CHECK(r.status == DecodeStatus::Bad);
    CHECK(r.error.find("key count 5 exceeds limit 4") != std::string::npos);
    auto m = decode_request(header_only(0x0b, 1ull << 62), Generation::G2, limits);  // MULTI_SET
    CHECK(m.status == DecodeStatus::Bad);
  }
  SUBCASE("whole request") {
    Command cmd = make(
        Op::MultiSet, {"a", "b", "c", "d"},
        {std::string(30, 'x'), std::string(30, 'y'), std::string(30, 'z'), std::string(30, 'w')});
    auto r = decode_request(encode_request(Generation::G2, cmd), Generation::G2, limits);
    CHECK(r.status == DecodeStatus::Bad);
    CHECK(r.error.find("request size exceeds limit 100") != std::string::npos);
  }
}

TEST_CASE("codec: connection classification") {
  CHECK(classify_connection("") == ConnectionKind::Undetermined);
  CHECK(classify_connection(std::string("\x06", 1)) == ConnectionKind::G1);      // GETNUMKEYS
  CHECK(classify_connection(std::string("\x03\x05", 2)) == ConnectionKind::G1);  // ADD init/
  CHECK(classify_connection(std::string("\x00\xce\xf7", 3)) == ConnectionKind::Undetermined);
  CHECK(classify_connection(hex_bytes({0x00, 0xce, 0xf7, 0x85, 0x3c})) == ConnectionKind::G2);
  CHECK(classify_connection(hex_bytes({0x00, 0x03, 0, 0, 0})) == ConnectionKind::G1);  // 1.13 SET
}

TEST_CASE("codec: encoder rejects ops and shapes a generation does not have") {
  CHECK_THROWS_AS(encode_request(Generation::G1, make(Op::Append, {"k"}, {"v"})),
                  std::invalid_argument);
  CHECK_THROWS_AS(encode_request(Generation::G1, make(Op::Tagged, {}, {}, 0, kTaggedVersion)),
                  std::invalid_argument);
  CHECK_THROWS_AS(encode_request(Generation::G1, make(Op::Unwatch, {"k"})), std::invalid_argument);
  CHECK_THROWS_AS(encode_request(Generation::G2, make(Op::MultiSet, {"a", "b"}, {"1"})),
                  std::invalid_argument);
}

TEST_CASE("codec: watch notification layout") {
  const std::string ev = encode_watch_event(WatchEventType::KeyCreated, "/wk", "", "abc");
  CHECK(ev == hex_bytes({0x01, 3, 0, 0, 0, 0, 0, 0, 0, '/', 'w', 'k', 0,   0,   0,  0,
                         0,    0, 0, 0, 3, 0, 0, 0, 0, 0,   0,   0,   'a', 'b', 'c'}));
}

// The session's decoder keeps its own state: every byte it is given is consumed exactly once
// (NeedMore always uses the whole input), so a frame costs time linear in its size however it is
// segmented, and it holds exactly the bytes of the unfinished request.
TEST_CASE("codec: RequestDecoder consumes each byte once, in any segmentation") {
  const StoreLimits limits;
  std::mt19937 rng(7);
  for (Generation gen : {Generation::G1, Generation::G2}) {
    CAPTURE(generation_name(gen));
    const auto commands = sample_commands(gen);
    std::string stream;
    for (const auto& cmd : commands) stream += encode_request(gen, cmd);
    for (int round = 0; round < 20; ++round) {
      RequestDecoder decoder(gen, limits);
      std::vector<Command> out;
      std::size_t fed = 0;
      std::size_t since_request = 0;  // bytes of the current request consumed so far
      while (fed < stream.size()) {
        const std::size_t n =
            std::min<std::size_t>(stream.size() - fed, round == 0 ? 1 : 1 + rng() % 700);
        std::string_view chunk(stream.data() + fed, n);
        while (!chunk.empty()) {
          const auto step = decoder.feed(chunk);
          REQUIRE(step.status != DecodeStatus::Bad);
          since_request += step.consumed;
          chunk.remove_prefix(step.consumed);
          if (step.status == DecodeStatus::NeedMore) {
            CHECK(chunk.empty());
            CHECK(decoder.held_bytes() == since_request);
            CHECK(decoder.mid_request() == (since_request > 0));
            break;
          }
          out.push_back(decoder.take());
          since_request = 0;
          CHECK(decoder.held_bytes() == 0);
        }
        fed += n;
      }
      CHECK(out == commands);
      CHECK_FALSE(decoder.mid_request());
    }
  }
}

TEST_CASE("codec: RequestDecoder refuses an oversize field before holding its bytes") {
  StoreLimits limits;
  limits.max_value_bytes = 32;
  RequestDecoder decoder(Generation::G2, limits);
  std::string frame(1, '\x01');  // G2 SET
  put_bytes(frame, "k");
  put_u64(frame, 1u << 30);
  const auto step = decoder.feed(frame);
  CHECK(step.status == DecodeStatus::Bad);
  CHECK(decoder.error() == "G2 SET: value length 1073741824 exceeds limit 32");
  CHECK(decoder.held_bytes() <= frame.size());
}

TEST_CASE("codec: ddprun's G2 extensions (PROBE, TAGGED, WATCH_KEY, UNWATCH) round trip") {
  CHECK(op_from_wire(Generation::G2, kG2ProbeWire) == Op::Probe);
  CHECK(op_from_wire(Generation::G2, kG2TaggedWire) == Op::Tagged);
  CHECK(op_from_wire(Generation::G2, kG2WatchKeyWire) == Op::WatchKey);
  CHECK(op_from_wire(Generation::G2, kG2UnwatchWire) == Op::Unwatch);
  CHECK_FALSE(op_from_wire(Generation::G2, 0x44));
  CHECK_FALSE(op_from_wire(Generation::G1, kG2TaggedWire));
  CHECK(wire_from_op(Generation::G1, Op::WatchKey) == 7);  // 1.13's, unchanged
  const Command cmds[] = {make(Op::Tagged, {}, {}, 0, kTaggedVersion), make(Op::WatchKey, {"/w"}),
                          make(Op::Unwatch, {"/w"}), make(Op::Probe, {"/a", "/b"})};
  for (const Command& cmd : cmds) {
    const std::string wire = encode_request(Generation::G2, cmd);
    CHECK(op_from_wire(Generation::G2, static_cast<std::uint8_t>(wire[0])) == cmd.op);
    const DecodeResult r = decode_request(wire, Generation::G2, StoreLimits{});
    REQUIRE(r.status == DecodeStatus::Ok);
    CHECK(r.consumed == wire.size());
    CHECK(r.command == cmd);
  }
  CHECK(encode_request(Generation::G2, make(Op::Tagged, {}, {}, 0, kTaggedVersion)) ==
        hex_bytes({0x41, 1, 0, 0, 0}));
}

TEST_CASE("codec: PROBE with a huge key count is refused when the count arrives") {
  std::string wire(1, static_cast<char>(kG2ProbeWire));
  put_u64(wire, std::uint64_t{1} << 40);
  const DecodeResult r = decode_request(wire, Generation::G2, StoreLimits{});
  CHECK(r.status == DecodeStatus::Bad);
  CHECK(r.error.find("key count") != std::string::npos);
}

TEST_CASE("codec: a tagged connection's notification body is type and key only") {
  CHECK(encode_key_event(WatchEventType::KeyDeleted, "/k") ==
        hex_bytes({0x02, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'k'}));
}
