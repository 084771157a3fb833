#include "rendezvous/protocol.hpp"

#include <array>
#include <utility>

namespace ddp::rdzv {
namespace {

// Index = wire byte.
constexpr std::array<Op, 9> kG1Ops = {Op::Set,        Op::CompareSet, Op::Get,
                                      Op::Add,        Op::Check,      Op::Wait,
                                      Op::GetNumKeys, Op::WatchKey,   Op::DeleteKey};
constexpr std::array<Op, 19> kG2Ops = {Op::Validate,   Op::Set,      Op::CompareSet, Op::Get,
                                       Op::Add,        Op::Check,    Op::Wait,       Op::GetNumKeys,
                                       Op::DeleteKey,  Op::Append,   Op::MultiGet,   Op::MultiSet,
                                       Op::CancelWait, Op::Ping,     Op::QueuePush,  Op::QueuePop,
                                       Op::QueueLen,   Op::ListKeys, Op::Barrier};

// ddprun extensions of G2 (docs/protocol.md): wire byte -> op.
constexpr std::pair<std::uint8_t, Op> kG2Extensions[] = {{kG2ProbeWire, Op::Probe},
                                                         {kG2TaggedWire, Op::Tagged},
                                                         {kG2WatchKeyWire, Op::WatchKey},
                                                         {kG2UnwatchWire, Op::Unwatch}};

std::optional<std::uint8_t> g2_extension_wire(Op op) {
  for (const auto& [wire, ext] : kG2Extensions)
    if (ext == op) return wire;
  return std::nullopt;
}

template <std::size_t N>
std::optional<std::uint8_t> find(const std::array<Op, N>& table, Op op) {
  for (std::size_t i = 0; i < N; ++i) {
    if (table[i] == op) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Op> op_from_wire(Generation gen, std::uint8_t byte) {
  if (gen == Generation::G1) {
    if (byte < kG1Ops.size()) return kG1Ops[byte];
    if (byte == kG1ProbeWire) return Op::Probe;
    return std::nullopt;
  }
  if (byte < kG2Ops.size()) return kG2Ops[byte];
  for (const auto& [wire, op] : kG2Extensions)
    if (wire == byte) return op;
  return std::nullopt;
}

bool has_op(Generation gen, Op op) {
  if (op == Op::Probe) return true;
  if (gen == Generation::G1) return find(kG1Ops, op).has_value();
  return find(kG2Ops, op).has_value() || g2_extension_wire(op).has_value();
}

std::uint8_t wire_from_op(Generation gen, Op op) {
  if (gen == Generation::G1) {
    if (op == Op::Probe) return kG1ProbeWire;
    return find(kG1Ops, op).value_or(0xFF);
  }
  if (auto byte = find(kG2Ops, op)) return *byte;
  return g2_extension_wire(op).value_or(0xFF);
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::Validate:
      return "VALIDATE";
    case Op::Set:
      return "SET";
    case Op::CompareSet:
      return "COMPARE_SET";
    case Op::Get:
      return "GET";
    case Op::Add:
      return "ADD";
    case Op::Check:
      return "CHECK";
    case Op::Wait:
      return "WAIT";
    case Op::GetNumKeys:
      return "GETNUMKEYS";
    case Op::WatchKey:
      return "WATCH_KEY";
    case Op::DeleteKey:
      return "DELETE_KEY";
    case Op::Append:
      return "APPEND";
    case Op::MultiGet:
      return "MULTI_GET";
    case Op::MultiSet:
      return "MULTI_SET";
    case Op::CancelWait:
      return "CANCEL_WAIT";
    case Op::Ping:
      return "PING";
    case Op::QueuePush:
      return "QUEUE_PUSH";
    case Op::QueuePop:
      return "QUEUE_POP";
    case Op::QueueLen:
      return "QUEUE_LEN";
    case Op::ListKeys:
      return "LIST_KEYS";
    case Op::Barrier:
      return "BARRIER";
    case Op::Probe:
      return "PROBE";
    case Op::Tagged:
      return "TAGGED";
    case Op::Unwatch:
      return "UNWATCH";
  }
  return "?";
}

std::string_view generation_name(Generation gen) { return gen == Generation::G1 ? "G1" : "G2"; }

}  // namespace ddp::rdzv
