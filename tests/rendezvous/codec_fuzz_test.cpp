// Seeded random frames against the decoder: it must never read out of bounds (run under ASan
// to be sure), never accept a length over the limits, and whatever it accepts must be exactly
// what the canonical encoder produces for the decoded command.

#include <doctest/doctest.h>

#include "rendezvous/codec.hpp"
#include "tests/rendezvous/fuzz_frames.hpp"

using namespace ddp::rdzv;
using ddp::rdzv::test::FrameFuzzer;

TEST_CASE("codec fuzz: random and damaged frames") {
  StoreLimits limits;
  limits.max_key_bytes = 512;
  limits.max_value_bytes = 8192;
  limits.max_keys_per_request = 16;
  limits.max_request_bytes = 32768;
  FrameFuzzer fuzz(20261130);
  std::size_t ok = 0, bad = 0, need_more = 0;
  for (int round = 0; round < 3000; ++round) {
    const Generation gen = fuzz.generation();
    const std::string stream = fuzz.stream(gen, 1 + fuzz.below(12));
    std::string buf;
    std::size_t fed = 0;
    bool closed = false;  // after a rejected frame the server drops the connection
    for (std::size_t chunk : fuzz.splits(stream.size())) {
      if (closed) break;
      buf.append(stream, fed, chunk);
      fed += chunk;
      bool stop = false;
      while (!buf.empty() && !stop) {
        const DecodeResult r = decode_request(buf, gen, limits);
        switch (r.status) {
          case DecodeStatus::Ok: {
            ++ok;
            REQUIRE(r.consumed <= buf.size());
            REQUIRE(encode_request(gen, r.command) == buf.substr(0, r.consumed));
            for (const auto& k : r.command.keys) REQUIRE(k.size() <= limits.max_key_bytes);
            for (const auto& v : r.command.values) REQUIRE(v.size() <= limits.max_value_bytes);
            REQUIRE(r.command.keys.size() <= limits.max_keys_per_request + 1);
            buf.erase(0, r.consumed);
            break;
          }
          case DecodeStatus::NeedMore:
            ++need_more;
            REQUIRE(r.need_total > buf.size());
            REQUIRE(r.need_total <= buf.size() + limits.max_request_bytes + 8);
            stop = true;
            break;
          case DecodeStatus::Bad:
            ++bad;
            REQUIRE_FALSE(r.error.empty());
            closed = stop = true;
            break;
        }
      }
    }
  }
  MESSAGE("decoded ", ok, " frames, ", bad, " rejected, ", need_more, " partial");
  CHECK(ok > 1000);
  CHECK(bad > 100);
}
