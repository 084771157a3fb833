#pragma once

// Seeded random request generator for fuzzing the decoder and a live server: valid frames of
// either generation, mutations of them (flipped bytes, truncation, absurd lengths) and garbage.
// Same seed, same bytes.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rendezvous/codec.hpp"

namespace ddp::rdzv::test {

class FrameFuzzer {
 public:
  explicit FrameFuzzer(std::uint64_t seed) : rng_(seed) {}

  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool chance(int percent) { return below(100) < static_cast<std::uint64_t>(percent); }
  Generation generation() { return chance(50) ? Generation::G1 : Generation::G2; }

  std::string key() {
    if (chance(80)) return "/f" + std::to_string(below(64));  // a small pool, so keys collide
    return bytes(below(24));
  }

  std::string bytes(std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(below(256));
    return s;
  }

  Command command(Generation gen) {
    static const Op kOps[] = {Op::Set,        Op::CompareSet, Op::Get,        Op::Add,
                              Op::Check,      Op::Wait,       Op::GetNumKeys, Op::WatchKey,
                              Op::DeleteKey,  Op::Append,     Op::MultiGet,   Op::MultiSet,
                              Op::CancelWait, Op::Ping,       Op::QueuePush,  Op::QueuePop,
                              Op::QueueLen,   Op::ListKeys,   Op::Barrier};
    Op op;
    do {
      op = kOps[below(std::size(kOps))];
    } while (!has_op(gen, op));
    Command cmd{op, {}, {}, 0, 0};
    const auto value = [&] { return bytes(chance(10) ? below(4096) : below(32)); };
    switch (op) {
      case Op::Set:
      case Op::Append:
      case Op::QueuePush:
        cmd.keys = {key()};
        cmd.values = {value()};
        break;
      case Op::CompareSet:
        cmd.keys = {key()};
        cmd.values = {chance(50) ? std::string() : value(), value()};
        break;
      case Op::Get:
      case Op::WatchKey:
      case Op::DeleteKey:
      case Op::QueuePop:
      case Op::QueueLen:
        cmd.keys = {key()};
        break;
      case Op::Add:
      case Op::Barrier:
        cmd.keys = {key()};
        cmd.number = static_cast<std::int64_t>(below(7)) - 3;
        break;
      case Op::Check:
      case Op::Wait:
      case Op::MultiGet:
        for (std::uint64_t i = below(5); i > 0; --i) cmd.keys.push_back(key());
        break;
      case Op::MultiSet:
        for (std::uint64_t i = below(5); i > 0; --i) {
          cmd.keys.push_back(key());
          cmd.values.push_back(value());
        }
        break;
      case Op::Ping:
        cmd.word = static_cast<std::uint32_t>(rng_());
        break;
      default:
        break;
    }
    return cmd;
  }

  // A valid frame, or a damaged one.
  std::string frame(Generation gen) {
    std::string f = encode_request(gen, command(gen));
    if (chance(75)) return f;
    switch (below(5)) {
      case 0:  // flip a byte
        f[below(f.size())] ^= static_cast<char>(1 + below(255));
        break;
      case 1:  // truncate
        f.resize(below(f.size()));
        break;
      case 2:  // an absurd or merely large length right after the opcode
        if (f.size() >= 9) {
          const std::uint64_t lengths[] = {~0ull, 1ull << 40, 0x3C85F7CEull, 1ull << 20,
                                           below(1 << 16)};
          std::string len;
          put_u64(len, lengths[below(std::size(lengths))]);
          f.replace(1, 8, len);
        }
        break;
      case 3:  // unknown opcode
        f[0] = static_cast<char>(19 + below(237));
        break;
      default:  // garbage
        f = bytes(below(64));
    }
    return f;
  }

  // A connection's worth of bytes: optional 2.x handshake, then frames.
  std::string stream(Generation gen, std::size_t frames) {
    std::string s;
    if (gen == Generation::G2 && chance(90)) {
      s += encode_request(gen, Command{Op::Validate, {}, {}, 0, kValidateMagic});
    }
    for (std::size_t i = 0; i < frames; ++i) s += frame(gen);
    return s;
  }

  // Random chunk sizes that add up to `total`.
  std::vector<std::size_t> splits(std::size_t total) {
    std::vector<std::size_t> out;
    while (total > 0) {
      const std::size_t n = std::min<std::size_t>(total, chance(20) ? 1 : 1 + below(700));
      out.push_back(n);
      total -= n;
    }
    return out;
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace ddp::rdzv::test
