#include "rendezvous/codec.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace ddp::rdzv {
namespace {

using Token = RequestDecoder::Token;

// Each op's fields in wire order.
constexpr Token kWordPlan[] = {Token::Word};
constexpr Token kKeyPlan[] = {Token::Key};
constexpr Token kKeyValuePlan[] = {Token::Key, Token::Value};
constexpr Token kCompareSetPlan[] = {Token::Key, Token::Value, Token::Value};
constexpr Token kKeyNumberPlan[] = {Token::Key, Token::Number};
constexpr Token kKeyListPlan[] = {Token::KeyList};
constexpr Token kPairListPlan[] = {Token::PairList};

struct Plan {
  const Token* tokens;
  std::size_t size;
};

template <std::size_t N>
constexpr Plan plan_of(const Token (&tokens)[N]) {
  return Plan{tokens, N};
}

Plan plan_for(Op op) {
  switch (op) {
    case Op::Validate:
    case Op::Ping:
    case Op::Tagged:
      return plan_of(kWordPlan);
    case Op::GetNumKeys:
    case Op::CancelWait:
    case Op::ListKeys:
      return Plan{nullptr, 0};
    case Op::Get:
    case Op::WatchKey:
    case Op::Unwatch:
    case Op::DeleteKey:
    case Op::QueuePop:
    case Op::QueueLen:
      return plan_of(kKeyPlan);
    case Op::Set:
    case Op::Append:
    case Op::QueuePush:
      return plan_of(kKeyValuePlan);
    case Op::CompareSet:
      return plan_of(kCompareSetPlan);
    case Op::Add:
    case Op::Barrier:
      return plan_of(kKeyNumberPlan);
    case Op::Check:
    case Op::Wait:
    case Op::MultiGet:
    case Op::Probe:
      return plan_of(kKeyListPlan);
    case Op::MultiSet:
      return plan_of(kPairListPlan);
  }
  return Plan{nullptr, 0};
}

// Fields up to this size get their whole length reserved on arrival; larger ones grow with the
// bytes actually received, so an announced-but-unsent value costs nothing.
constexpr std::size_t kReserveWholeFieldBytes = 4096;
// List vectors are reserved up to this many items; a longer list grows as its items arrive.
constexpr std::size_t kReserveListItems = 256;

}  // namespace

bool RequestDecoder::decode_whole(std::string_view in, std::size_t& pos) {
  const char* p = in.data();
  const std::size_t size = in.size();
  std::size_t request_bytes = 0;
  auto field = [&](bool is_key) {
    if (size - pos < 8) return false;
    const std::uint64_t len = get_u64(p + pos);
    pos += 8;
    if (len > (is_key ? limits_->max_key_bytes : limits_->max_value_bytes)) return false;
    request_bytes += static_cast<std::size_t>(len);
    if (request_bytes > limits_->max_request_bytes || size - pos < len) return false;
    (is_key ? cmd_.keys : cmd_.values).emplace_back(p + pos, static_cast<std::size_t>(len));
    pos += static_cast<std::size_t>(len);
    return true;
  };
  for (std::size_t t = 0; t < plan_size_; ++t) {
    switch (plan_[t]) {
      case Token::Word:
        if (size - pos < 4) return false;
        cmd_.word = get_u32(p + pos);
        pos += 4;
        break;
      case Token::Number:
        if (size - pos < 8) return false;
        cmd_.number = get_i64(p + pos);
        pos += 8;
        break;
      case Token::Key:
      case Token::Value:
        if (!field(plan_[t] == Token::Key)) return false;
        break;
      case Token::KeyList:
      case Token::PairList: {
        if (size - pos < 8) return false;
        const std::uint64_t n = get_u64(p + pos);
        pos += 8;
        if (n > limits_->max_keys_per_request) return false;
        const bool pairs = plan_[t] == Token::PairList;
        // Reserve only for as many items as the bytes at hand could hold.
        const auto plausible =
            static_cast<std::size_t>(std::min<std::uint64_t>(n, (size - pos) / (pairs ? 16 : 8)));
        cmd_.keys.reserve(plausible);
        if (pairs) cmd_.values.reserve(plausible);
        for (std::uint64_t i = 0; i < n; ++i) {
          if (!field(true) || (pairs && !field(false))) return false;
        }
        break;
      }
    }
  }
  return true;
}

RequestDecoder::Step RequestDecoder::feed(std::string_view in) {
  std::size_t pos = 0;
  // Fast path: a request that is whole in `in` (almost every one) is decoded straight through.
  // Anything else (incomplete, or breaking a limit, which the state machine reports) is dropped
  // and goes through the state machine below from the request's first byte: only a request's
  // first input is ever decoded twice, so the cost stays linear.
  if (phase_ == Phase::Opcode && !in.empty()) {
    if (const auto op = op_from_wire(gen_, static_cast<std::uint8_t>(in[0]))) {
      const Plan plan = plan_for(*op);
      plan_ = plan.tokens;
      plan_size_ = plan.size;
      cmd_.op = *op;
      std::size_t end = 1;
      if (decode_whole(in, end)) {
        held_ = end;
        phase_ = Phase::Done;
        return {DecodeStatus::Ok, end};
      }
      cmd_.keys.clear();
      cmd_.values.clear();
      cmd_.word = 0;
      cmd_.number = 0;
    }
  }
  for (;;) {
    if (phase_ == Phase::Done) return {DecodeStatus::Ok, pos};
    if (phase_ == Phase::Bad) return {DecodeStatus::Bad, pos};
    if (pos == in.size()) return {DecodeStatus::NeedMore, pos};
    switch (phase_) {
      case Phase::Opcode: {
        const auto opcode = static_cast<std::uint8_t>(in[pos++]);
        const auto op = op_from_wire(gen_, opcode);
        if (!op) {
          phase_ = Phase::Bad;
          error_ = fmt::format("unknown {} opcode 0x{:02x}", generation_name(gen_), opcode);
          break;
        }
        cmd_.op = *op;
        const Plan plan = plan_for(*op);
        plan_ = plan.tokens;
        plan_size_ = plan.size;
        held_ = 1;
        token_ = static_cast<std::size_t>(-1);  // next_token() starts the plan's first field
        next_token();
        break;
      }
      case Phase::Scalar: {
        if (scalar_have_ == 0 && in.size() - pos >= scalar_size_) {  // common case: decode in place
          const char* bytes = in.data() + pos;
          pos += scalar_size_;
          held_ += scalar_size_;
          scalar_done(bytes);
          break;
        }
        const std::size_t n = std::min(scalar_size_ - scalar_have_, in.size() - pos);
        std::memcpy(scalar_ + scalar_have_, in.data() + pos, n);
        scalar_have_ += n;
        pos += n;
        held_ += n;
        if (scalar_have_ == scalar_size_) scalar_done(scalar_);
        break;
      }
      case Phase::Field: {
        const std::size_t n = std::min(field_left_, in.size() - pos);
        if (n == field_left_ && field_->empty()) {
          field_->assign(in.data() + pos, n);  // common case: the whole field is here
        } else {
          if (field_->empty() && field_left_ <= kReserveWholeFieldBytes)
            field_->reserve(field_left_);
          field_->append(in.data() + pos, n);
        }
        field_left_ -= n;
        pos += n;
        held_ += n;
        if (field_left_ == 0) field_done();
        break;
      }
      case Phase::Done:
      case Phase::Bad:
        break;
    }
  }
}

Command RequestDecoder::take() {
  Command done = std::move(cmd_);  // leaves cmd_'s vectors empty
  cmd_.number = 0;
  cmd_.word = 0;
  phase_ = Phase::Opcode;
  request_bytes_ = 0;
  held_ = 0;
  return done;
}

std::size_t RequestDecoder::still_needed() const {
  switch (phase_) {
    case Phase::Opcode:
      return 1;
    case Phase::Scalar:
      return scalar_size_ - scalar_have_;
    case Phase::Field:
      return field_left_;
    case Phase::Done:
    case Phase::Bad:
      return 0;
  }
  return 0;
}

void RequestDecoder::next_token() {
  ++token_;
  if (token_ >= plan_size_) {
    phase_ = Phase::Done;
    return;
  }
  switch (plan_[token_]) {
    case Token::Word:
      begin_scalar(4, ScalarFor::Word);
      break;
    case Token::Number:
      begin_scalar(8, ScalarFor::Number);
      break;
    case Token::Key:
      begin_field(true);
      break;
    case Token::Value:
      begin_field(false);
      break;
    case Token::KeyList:
    case Token::PairList:
      begin_scalar(8, ScalarFor::Count);
      break;
  }
}

void RequestDecoder::begin_scalar(std::size_t size, ScalarFor purpose) {
  phase_ = Phase::Scalar;
  scalar_size_ = size;
  scalar_have_ = 0;
  scalar_for_ = purpose;
}

void RequestDecoder::begin_field(bool is_key) {
  field_is_key_ = is_key;
  begin_scalar(8, ScalarFor::FieldLength);
}

void RequestDecoder::scalar_done(const char* bytes) {
  switch (scalar_for_) {
    case ScalarFor::Word:
      cmd_.word = get_u32(bytes);
      next_token();
      return;
    case ScalarFor::Number:
      cmd_.number = get_i64(bytes);
      next_token();
      return;
    case ScalarFor::Count: {
      const std::uint64_t n = get_u64(bytes);
      if (n > limits_->max_keys_per_request) {
        fail(fmt::format("key count {} exceeds limit {}", n, limits_->max_keys_per_request));
        return;
      }
      list_left_ = n;
      pair_value_next_ = false;
      const auto reserve = static_cast<std::size_t>(std::min<std::uint64_t>(n, kReserveListItems));
      cmd_.keys.reserve(reserve);
      if (plan_[token_] == Token::PairList) cmd_.values.reserve(reserve);
      if (n == 0) {
        next_token();
      } else {
        begin_field(true);
      }
      return;
    }
    case ScalarFor::FieldLength: {
      const std::uint64_t len = get_u64(bytes);
      const std::size_t cap = field_is_key_ ? limits_->max_key_bytes : limits_->max_value_bytes;
      if (len > cap) {
        fail(fmt::format("{} length {} exceeds limit {}", field_is_key_ ? "key" : "value", len,
                         cap));
        return;
      }
      request_bytes_ += static_cast<std::size_t>(len);
      if (request_bytes_ > limits_->max_request_bytes) {
        fail(fmt::format("request size exceeds limit {}", limits_->max_request_bytes));
        return;
      }
      field_ = field_is_key_ ? &cmd_.keys.emplace_back() : &cmd_.values.emplace_back();
      field_left_ = static_cast<std::size_t>(len);
      if (field_left_ == 0) {
        field_done();
        return;
      }
      phase_ = Phase::Field;
      return;
    }
  }
}

void RequestDecoder::field_done() {
  field_ = nullptr;
  const Token token = plan_[token_];
  if (token == Token::KeyList) {
    list_item_done();
  } else if (token == Token::PairList) {
    if (!pair_value_next_) {
      pair_value_next_ = true;
      begin_field(false);
    } else {
      pair_value_next_ = false;
      list_item_done();
    }
  } else {
    next_token();
  }
}

void RequestDecoder::list_item_done() {
  if (--list_left_ == 0) {
    next_token();
  } else {
    begin_field(true);
  }
}

void RequestDecoder::fail(std::string reason) {
  phase_ = Phase::Bad;
  error_ = fmt::format("{} {}: {}", generation_name(gen_), op_name(cmd_.op), reason);
}

DecodeResult decode_request(std::string_view buf, Generation gen, const StoreLimits& limits) {
  DecodeResult result;
  RequestDecoder decoder(gen, limits);
  const RequestDecoder::Step step = decoder.feed(buf);
  result.status = step.status;
  switch (step.status) {
    case DecodeStatus::Ok:
      result.consumed = step.consumed;
      result.command = decoder.take();
      break;
    case DecodeStatus::NeedMore:
      result.need_total = buf.size() + decoder.still_needed();
      break;
    case DecodeStatus::Bad:
      result.error = decoder.error();
      break;
  }
  return result;
}

ConnectionKind classify_connection(std::string_view first_bytes) {
  if (first_bytes.empty()) return ConnectionKind::Undetermined;
  if (first_bytes[0] != 0) return ConnectionKind::G1;
  if (first_bytes.size() < 5) return ConnectionKind::Undetermined;
  return get_u32(first_bytes.data() + 1) == kValidateMagic ? ConnectionKind::G2
                                                           : ConnectionKind::G1;
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

std::string encode_request(Generation gen, const Command& cmd) {
  if (!has_op(gen, cmd.op)) {
    throw std::invalid_argument(
        fmt::format("{} has no {} command", generation_name(gen), op_name(cmd.op)));
  }
  auto require = [&](std::size_t keys, std::size_t values) {
    if (cmd.keys.size() != keys || cmd.values.size() != values) {
      throw std::invalid_argument(
          fmt::format("{} needs {} key(s) and {} value(s)", op_name(cmd.op), keys, values));
    }
  };
  std::string out;
  put_u8(out, wire_from_op(gen, cmd.op));
  switch (cmd.op) {
    case Op::Validate:
    case Op::Ping:
    case Op::Tagged:
      put_u32(out, cmd.word);
      break;
    case Op::GetNumKeys:
    case Op::CancelWait:
    case Op::ListKeys:
      break;
    case Op::Get:
    case Op::WatchKey:
    case Op::Unwatch:
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
    case Op::Probe:
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

std::string encode_watch_event(WatchEventType type, std::string_view key,
                               std::string_view old_value, std::string_view new_value) {
  std::string out;
  put_u8(out, static_cast<std::uint8_t>(type));
  put_bytes(out, key);
  put_bytes(out, old_value);
  put_bytes(out, new_value);
  return out;
}

std::string encode_key_event(WatchEventType type, std::string_view key) {
  std::string out;
  out.reserve(1 + 8 + key.size());
  put_u8(out, static_cast<std::uint8_t>(type));
  put_bytes(out, key);
  return out;
}

}  // namespace ddp::rdzv
