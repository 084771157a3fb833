#include "rendezvous/codec.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace ddp::rdzv {
namespace {

// Cursor over the buffer that records why it stopped. Every read either succeeds or leaves the
// cursor in NeedMore/Bad; callers stop at the first failure.
class Reader {
 public:
  Reader(std::string_view buf, const StoreLimits& limits) : buf_(buf), limits_(limits) {}

  bool u32(std::uint32_t& v) {
    if (!need(4)) return false;
    v = get_u32(buf_.data() + pos_);
    pos_ += 4;
    return true;
  }

  bool u64(std::uint64_t& v) {
    if (!need(8)) return false;
    v = get_u64(buf_.data() + pos_);
    pos_ += 8;
    return true;
  }

  bool i64(std::int64_t& v) {
    if (!need(8)) return false;
    v = get_i64(buf_.data() + pos_);
    pos_ += 8;
    return true;
  }

  // Length-prefixed field, checked against `cap` (and the per-request budget) before it is
  // waited for or copied.
  bool field(std::string& out, std::size_t cap, std::string_view what) {
    std::uint64_t len = 0;
    if (!u64(len)) return false;
    if (len > cap) return bad(fmt::format("{} length {} exceeds limit {}", what, len, cap));
    request_bytes_ += len;
    if (request_bytes_ > limits_.max_request_bytes) {
      return bad(fmt::format("request size exceeds limit {}", limits_.max_request_bytes));
    }
    if (!need(static_cast<std::size_t>(len))) return false;
    out.assign(buf_.data() + pos_, static_cast<std::size_t>(len));
    pos_ += static_cast<std::size_t>(len);
    return true;
  }

  bool key(std::string& out) { return field(out, limits_.max_key_bytes, "key"); }
  bool value(std::string& out) { return field(out, limits_.max_value_bytes, "value"); }

  bool count(std::uint64_t& n) {
    if (!u64(n)) return false;
    if (n > limits_.max_keys_per_request) {
      return bad(fmt::format("key count {} exceeds limit {}", n, limits_.max_keys_per_request));
    }
    return true;
  }

  bool bad(std::string message) {
    status_ = DecodeStatus::Bad;
    error_ = std::move(message);
    return false;
  }

  // How many of `n` announced items the bytes at hand could hold (each needs at least
  // `min_item_bytes`), so a reservation never exceeds what the peer has actually sent.
  std::size_t plausible_items(std::uint64_t n, std::size_t min_item_bytes) const {
    const std::size_t fit = (buf_.size() - pos_) / min_item_bytes;
    return n < fit ? static_cast<std::size_t>(n) : fit;
  }

  void skip(std::size_t n) { pos_ += n; }
  std::size_t pos() const { return pos_; }
  DecodeStatus status() const { return status_; }
  std::size_t need_total() const { return need_total_; }
  std::string& error() { return error_; }

 private:
  bool need(std::size_t n) {
    if (buf_.size() - pos_ >= n) return true;
    status_ = DecodeStatus::NeedMore;
    need_total_ = pos_ + n;
    return false;
  }

  std::string_view buf_;
  const StoreLimits& limits_;
  std::size_t pos_ = 0;
  std::size_t request_bytes_ = 0;
  std::size_t need_total_ = 0;
  DecodeStatus status_ = DecodeStatus::Ok;
  std::string error_;
};

bool read_keys(Reader& r, Command& cmd) {
  std::uint64_t n = 0;
  if (!r.count(n)) return false;
  cmd.keys.reserve(r.plausible_items(n, 8));
  for (std::uint64_t i = 0; i < n; ++i) {
    if (!r.key(cmd.keys.emplace_back())) return false;
  }
  return true;
}

bool read_pairs(Reader& r, Command& cmd) {
  std::uint64_t n = 0;
  if (!r.count(n)) return false;
  cmd.keys.reserve(r.plausible_items(n, 16));
  cmd.values.reserve(r.plausible_items(n, 16));
  for (std::uint64_t i = 0; i < n; ++i) {
    if (!r.key(cmd.keys.emplace_back())) return false;
    if (!r.value(cmd.values.emplace_back())) return false;
  }
  return true;
}

bool read_body(Reader& r, Command& cmd) {
  switch (cmd.op) {
    case Op::Validate:
    case Op::Ping:
      return r.u32(cmd.word);
    case Op::GetNumKeys:
    case Op::CancelWait:
    case Op::ListKeys:
      return true;
    case Op::Get:
    case Op::WatchKey:
    case Op::DeleteKey:
    case Op::QueuePop:
    case Op::QueueLen:
      return r.key(cmd.keys.emplace_back());
    case Op::Set:
    case Op::Append:
    case Op::QueuePush:
      return r.key(cmd.keys.emplace_back()) && r.value(cmd.values.emplace_back());
    case Op::CompareSet:
      return r.key(cmd.keys.emplace_back()) && r.value(cmd.values.emplace_back()) &&
             r.value(cmd.values.emplace_back());
    case Op::Add:
    case Op::Barrier:
      return r.key(cmd.keys.emplace_back()) && r.i64(cmd.number);
    case Op::Check:
    case Op::Wait:
    case Op::MultiGet:
      return read_keys(r, cmd);
    case Op::MultiSet:
      return read_pairs(r, cmd);
  }
  return r.bad("unhandled opcode");
}

}  // namespace

DecodeResult decode_request(std::string_view buf, Generation gen, const StoreLimits& limits) {
  DecodeResult result;
  if (buf.empty()) {
    result.need_total = 1;
    return result;
  }
  const auto opcode = static_cast<std::uint8_t>(buf[0]);
  const auto op = op_from_wire(gen, opcode);
  if (!op) {
    result.status = DecodeStatus::Bad;
    result.error = fmt::format("unknown {} opcode 0x{:02x}", generation_name(gen), opcode);
    return result;
  }
  Reader reader(buf, limits);
  reader.skip(1);
  result.command.op = *op;
  if (read_body(reader, result.command)) {
    result.status = DecodeStatus::Ok;
    result.consumed = reader.pos();
    return result;
  }
  result.status = reader.status();
  if (result.status == DecodeStatus::Bad) {
    result.error = fmt::format("{} {}: {}", generation_name(gen), op_name(*op), reader.error());
  } else {
    result.need_total = reader.need_total();
  }
  result.command = Command{};
  return result;
}

ConnectionKind classify_connection(std::string_view first_bytes) {
  if (first_bytes.empty()) return ConnectionKind::Undetermined;
  if (first_bytes[0] != 0) return ConnectionKind::G1;
  if (first_bytes.size() < 5) return ConnectionKind::Undetermined;
  return get_u32(first_bytes.data() + 1) == kValidateMagic ? ConnectionKind::G2 : ConnectionKind::G1;
}

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_i64(std::string& out, std::int64_t v) { put_u64(out, static_cast<std::uint64_t>(v)); }

void put_bytes(std::string& out, std::string_view bytes) {
  put_u64(out, bytes.size());
  out.append(bytes);
}

std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

std::int64_t get_i64(const char* p) { return static_cast<std::int64_t>(get_u64(p)); }

std::string encode_request(Generation gen, const Command& cmd) {
  if (!has_op(gen, cmd.op)) {
    throw std::invalid_argument(
        fmt::format("{} has no {} command", generation_name(gen), op_name(cmd.op)));
  }
  auto require = [&](std::size_t keys, std::size_t values) {
    if (cmd.keys.size() != keys || cmd.values.size() != values) {
      throw std::invalid_argument(fmt::format("{} needs {} key(s) and {} value(s)",
                                              op_name(cmd.op), keys, values));
    }
  };
  std::string out;
  put_u8(out, wire_from_op(gen, cmd.op));
  switch (cmd.op) {
    case Op::Validate:
    case Op::Ping:
      put_u32(out, cmd.word);
      break;
    case Op::GetNumKeys:
    case Op::CancelWait:
    case Op::ListKeys:
      break;
    case Op::Get:
    case Op::WatchKey:
    case Op::DeleteKey:
    case Op::QueuePop:
    case Op::QueueLen:
      require(1, 0);
      put_bytes(out, cmd.keys[0]);
      break;
    case Op::Set:
    case Op::Append:
    case Op::QueuePush:
      require(1, 1);
      put_bytes(out, cmd.keys[0]);
      put_bytes(out, cmd.values[0]);
      break;
    case Op::CompareSet:
      require(1, 2);
      put_bytes(out, cmd.keys[0]);
      put_bytes(out, cmd.values[0]);
      put_bytes(out, cmd.values[1]);
      break;
    case Op::Add:
    case Op::Barrier:
      require(1, 0);
      put_bytes(out, cmd.keys[0]);
      put_i64(out, cmd.number);
      break;
    case Op::Check:
    case Op::Wait:
    case Op::MultiGet:
      require(cmd.keys.size(), 0);
      put_u64(out, cmd.keys.size());
      for (const auto& k : cmd.keys) put_bytes(out, k);
      break;
    case Op::MultiSet:
      require(cmd.keys.size(), cmd.keys.size());
      put_u64(out, cmd.keys.size());
      for (std::size_t i = 0; i < cmd.keys.size(); ++i) {
        put_bytes(out, cmd.keys[i]);
        put_bytes(out, cmd.values[i]);
      }
      break;
  }
  return out;
}

std::string encode_watch_event(WatchEventType type, std::string_view key, std::string_view old_value,
                               std::string_view new_value) {
  std::string out;
  put_u8(out, static_cast<std::uint8_t>(type));
  put_bytes(out, key);
  put_bytes(out, old_value);
  put_bytes(out, new_value);
  return out;
}

}  // namespace ddp::rdzv
