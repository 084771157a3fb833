#include "rendezvous/replication.hpp"

#include <charconv>
#include <stdexcept>

namespace ddp::rdzv {

std::optional<Command> replicated_form(const Command& cmd) {
  switch (cmd.op) {
    case Op::Set:
    case Op::CompareSet:
    case Op::Add:
    case Op::DeleteKey:
    case Op::Append:
    case Op::MultiSet:
    case Op::QueuePush:
    case Op::QueuePop:
      return cmd;
    case Op::Barrier:
      return Command{Op::Add, cmd.keys, {}, 1, 0};
    default:
      return std::nullopt;
  }
}

std::string encode_replication_frame(std::uint64_t sequence, const Command& mutation) {
  std::string frame;
  put_u64(frame, sequence);
  frame += encode_request(Generation::G2, mutation);
  return frame;
}

std::string encode_acknowledgement(std::uint64_t sequence) {
  return encode_request(Generation::G2,
                        Command{Op::Set, {std::string(kAckKey)}, {std::to_string(sequence)}, 0, 0});
}

std::optional<std::uint64_t> parse_sequence(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

ReplicationSnapshot encode_snapshot(const StoreModel& model, std::uint64_t& sequence) {
  ReplicationSnapshot out;
  for (const auto& key : model.list_keys()) {
    if (const std::string* value = model.get(key)) {
      out.frames += encode_replication_frame(++sequence, Command{Op::Set, {key}, {*value}, 0, 0});
      ++out.keys;
    }
  }
  // After the keys: a queue's items are pushed in order, so the standby's queue pops the same.
  for (const auto& [queue, items] : model.queues()) {
    for (const auto& item : items) {
      out.frames +=
          encode_replication_frame(++sequence, Command{Op::QueuePush, {queue}, {item}, 0, 0});
      ++out.queue_items;
    }
  }
  return out;
}

std::optional<ReplicationFrame> ReplicationFrameParser::next() {
  const std::string_view rest(buffer_.data() + offset_, buffer_.size() - offset_);
  if (rest.size() < 8) return std::nullopt;
  DecodeResult r = decode_request(rest.substr(8), Generation::G2, limits_);
  if (r.status == DecodeStatus::Bad)
    throw std::runtime_error("malformed replication frame: " + r.error);
  if (r.status == DecodeStatus::NeedMore) return std::nullopt;
  ReplicationFrame frame{get_u64(rest.data()), std::move(r.command)};
  offset_ += 8 + r.consumed;
  // Compact once the consumed prefix dominates, so the buffer stays proportional to what is unread.
  if (offset_ > std::size_t{64} * 1024 && offset_ * 2 > buffer_.size()) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return frame;
}

bool standby_admits(const Command& cmd, bool handshake) {
  if (cmd.op == Op::Validate || cmd.op == Op::Ping) return true;
  if (cmd.op == Op::CompareSet && cmd.keys.size() == 1 && cmd.keys[0] == kPromoteKey) return true;
  return handshake;
}

std::optional<std::int64_t> parse_epoch(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value <= 0) return std::nullopt;
  return value;
}

}  // namespace ddp::rdzv
