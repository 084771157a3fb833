#pragma once

// Sample requests covering every command of both generations, shared by the codec unit tests
// and the fuzz driver.

#include <string>
#include <vector>

#include "rendezvous/codec.hpp"

namespace ddp::rdzv::test {

inline Command make(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
                    std::int64_t number = 0, std::uint32_t word = 0) {
  return Command{op, std::move(keys), std::move(values), number, word};
}

inline std::vector<Command> sample_commands(Generation gen) {
  const std::string big(3000, 'v');
  std::vector<Command> all = {
      make(Op::Set, {"/k1"}, {"v1"}),
      make(Op::Set, {""}, {""}),
      make(Op::Set, {"/big"}, {big}),
      make(Op::CompareSet, {"/k"}, {"", "new"}),
      make(Op::Get, {"/k1"}),
      make(Op::Add, {"/cnt"}, {}, -2),
      make(Op::Check, {"/a", "/b"}),
      make(Op::Check, {}),
      make(Op::Wait, {"/a", "/a", "/b"}),
      make(Op::GetNumKeys),
      make(Op::DeleteKey, {"/k1"}),
  };
  if (gen == Generation::G1) {
    all.push_back(make(Op::WatchKey, {"/wk"}));
  } else {
    all.insert(all.begin(), make(Op::Validate, {}, {}, 0, kValidateMagic));
    all.insert(all.begin() + 1, make(Op::Ping, {}, {}, 0, 0x00FF1234));
    all.push_back(make(Op::Append, {"/k"}, {"tail"}));
    all.push_back(make(Op::MultiGet, {"/x", "/y", "/z"}));
    all.push_back(make(Op::MultiSet, {"/x", "/y"}, {"1", std::string("\0\xff", 2)}));
    all.push_back(make(Op::CancelWait));
    all.push_back(make(Op::QueuePush, {"/q"}, {"item"}));
    all.push_back(make(Op::QueuePop, {"/q"}));
    all.push_back(make(Op::QueueLen, {"/q"}));
    all.push_back(make(Op::ListKeys));
    all.push_back(make(Op::Barrier, {"/bar"}, {}, 4));
  }
  return all;
}

}  // namespace ddp::rdzv::test
