#include "rendezvous/command_handler.hpp"

#include <fmt/format.h>

namespace ddp::rdzv {
namespace {

Outcome close_with(std::string reason) {
  Outcome out;
  out.close_reason = std::move(reason);
  return out;
}

// What a request would add to the store if executed: new keys and bytes (StoreModel's
// accounting). An upper bound where duplicates within one request make the exact figure costly.
struct Growth {
  std::size_t keys = 0;
  std::size_t bytes = 0;
};

void grow_by_write(const StoreModel& model, const std::string& key, std::size_t new_size,
                   Growth& g) {
  if (const std::string* old = model.get(key)) {
    if (new_size > old->size()) g.bytes += new_size - old->size();
  } else {
    ++g.keys;
    g.bytes += StoreModel::entry_bytes(key.size(), new_size);
  }
}

constexpr std::size_t kCounterTextBytes = 20;  // the longest int64 in decimal

Growth growth_of(const StoreModel& model, const Command& cmd) {
  Growth g;
  switch (cmd.op) {
    case Op::Set:
      grow_by_write(model, cmd.keys[0], cmd.values[0].size(), g);
      break;
    case Op::MultiSet:
      for (std::size_t i = 0; i < cmd.keys.size(); ++i)
        grow_by_write(model, cmd.keys[i], cmd.values[i].size(), g);
      break;
    case Op::Append: {
      const std::string* old = model.get(cmd.keys[0]);
      grow_by_write(model, cmd.keys[0], (old ? old->size() : 0) + cmd.values[0].size(), g);
      break;
    }
    case Op::CompareSet: {
      const std::string* old = model.get(cmd.keys[0]);
      const bool writes = old ? *old == cmd.values[0] : cmd.values[0].empty();
      if (writes) grow_by_write(model, cmd.keys[0], cmd.values[1].size(), g);
      break;
    }
    case Op::Add:
    case Op::Barrier:
      grow_by_write(model, cmd.keys[0], kCounterTextBytes, g);
      if (cmd.op == Op::Barrier) g.bytes += StoreModel::entry_bytes(cmd.keys[0].size(), 0);
      break;
    case Op::QueuePush:
      if (model.queue_len(cmd.keys[0]) == 0) {
        ++g.keys;
        g.bytes += StoreModel::entry_bytes(cmd.keys[0].size(), 0);
      }
      g.bytes += StoreModel::entry_bytes(0, cmd.values[0].size());
      break;
    case Op::Wait:
      for (const auto& key : cmd.keys) g.bytes += StoreModel::entry_bytes(key.size(), 0);
      break;
    case Op::WatchKey:
      g.bytes += StoreModel::entry_bytes(cmd.keys[0].size(), 0);
      break;
    default:
      break;
  }
  return g;
}

// growth_of without looking anything up: what the request adds if every key it writes is new.
// Almost every request fits under this bound, so the exact figure is rarely needed.
Growth upper_growth_of(const Command& cmd) {
  Growth g;
  auto entry = [&](std::size_t key_bytes, std::size_t value_bytes) {
    g.bytes += StoreModel::entry_bytes(key_bytes, value_bytes);
  };
  switch (cmd.op) {
    case Op::Set:
    case Op::Append:  // ignores the old value: APPEND always takes the exact path
      g.keys = 1;
      entry(cmd.keys[0].size(), cmd.values[0].size());
      break;
    case Op::MultiSet:
      g.keys = cmd.keys.size();
      for (std::size_t i = 0; i < cmd.keys.size(); ++i)
        entry(cmd.keys[i].size(), cmd.values[i].size());
      break;
    case Op::CompareSet:
      g.keys = 1;
      entry(cmd.keys[0].size(), cmd.values[1].size());
      break;
    case Op::Add:
    case Op::Barrier:
    case Op::QueuePush:
      g.keys = 1;
      entry(cmd.keys[0].size(), kCounterTextBytes);
      entry(0, cmd.values.empty() ? 0 : cmd.values[0].size());
      break;
    case Op::Wait:
    case Op::WatchKey:
      for (const auto& key : cmd.keys) entry(key.size(), 0);
      break;
    default:
      break;
  }
  return g;
}

bool fits(const StoreModel& model, const Growth& g, const StoreLimits& limits) {
  return model.key_count() + g.keys <= limits.max_keys &&
         model.held_bytes() + g.bytes <= limits.max_store_bytes;
}

// Bytes of the reply a request would get, for the requests whose reply is not bounded by one
// value (every other reply is at most one value, bounded by --max-value-bytes).
std::size_t multi_reply_bytes(const StoreModel& model, const Command& cmd) {
  std::size_t bytes = 8;
  if (cmd.op == Op::MultiGet) {
    for (const auto& key : cmd.keys) {
      const std::string* value = model.get(key);
      bytes += 8 + (value ? value->size() : 0);
    }
  } else if (cmd.op == Op::ListKeys) {
    bytes += model.list_keys_bytes();
  }
  return bytes;
}

// Why the request must be refused under `limits`, or nullopt when it fits.
std::optional<std::string> refusal(const StoreModel& model, const Command& cmd,
                                   const StoreLimits& limits) {
  switch (cmd.op) {  // requests that neither grow the store nor get a reply of many values
    case Op::Validate:
    case Op::Ping:
    case Op::Get:
    case Op::Check:
    case Op::Probe:
    case Op::Tagged:
    case Op::Unwatch:
    case Op::GetNumKeys:
    case Op::DeleteKey:
    case Op::CancelWait:
    case Op::QueuePop:
    case Op::QueueLen:
      return std::nullopt;
    default:
      break;
  }
  if (cmd.op == Op::MultiGet || cmd.op == Op::ListKeys) {
    const std::size_t reply = multi_reply_bytes(model, cmd);
    if (reply > limits.max_reply_bytes) {
      return fmt::format("{} reply of {} bytes exceeds the reply limit of {} bytes",
                         op_name(cmd.op), reply, limits.max_reply_bytes);
    }
    return std::nullopt;
  }
  if (cmd.op == Op::Append) {
    const std::string* old = model.get(cmd.keys[0]);
    const std::size_t size = (old ? old->size() : 0) + cmd.values[0].size();
    if (size > limits.max_value_bytes) {
      return fmt::format("APPEND would make a value of {} bytes, over the value limit of {} bytes",
                         size, limits.max_value_bytes);
    }
  }
  if (cmd.op != Op::Append && fits(model, upper_growth_of(cmd), limits)) return std::nullopt;
  const Growth g = growth_of(model, cmd);
  if (g.keys > 0 && model.key_count() + g.keys > limits.max_keys) {
    return fmt::format("{} would exceed the store's key limit of {}", op_name(cmd.op),
                       limits.max_keys);
  }
  if (g.bytes > 0 && model.held_bytes() + g.bytes > limits.max_store_bytes) {
    return fmt::format("{} would take the store past its limit of {} bytes ({} held)",
                       op_name(cmd.op), limits.max_store_bytes, model.held_bytes());
  }
  return std::nullopt;
}

// Why the TAGGED extension's rules forbid the request on this connection, or nullopt.
std::optional<std::string> framing_refusal(Generation gen, const Command& cmd, Framing framing) {
  if (gen != Generation::G2) return std::nullopt;  // G1 has no TAGGED; its WATCH_KEY is 1.13's
  switch (cmd.op) {
    case Op::Tagged:
      if (framing == Framing::Tagged) return "TAGGED on a connection already tagged";
      if (cmd.word != kTaggedVersion)
        return fmt::format("TAGGED version {} (this store speaks {})", cmd.word, kTaggedVersion);
      return std::nullopt;
    case Op::WatchKey:
    case Op::Unwatch:
      if (framing != Framing::Tagged) {
        return fmt::format("G2 {} on a connection not in tagged mode (send TAGGED first)",
                           op_name(cmd.op));
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

Outcome handle_command(StoreModel& model, ClientId client, Generation gen, Command&& cmd,
                       bool first_request, const StoreLimits& limits, Framing framing) {
  Outcome out;
  // A 1.13 client sends no CANCEL: a new request while its WAIT is still registered means that
  // wait timed out on the client side. Drop it so no stray STOP_WAITING desynchronises the
  // connection later.
  if (gen == Generation::G1 && model.has_pending_wait(client)) model.cancel_wait(client);

  if (gen == Generation::G2 && first_request != (cmd.op == Op::Validate)) {
    return close_with(first_request ? "first request is not VALIDATE"
                                    : "VALIDATE after the first request");
  }
  if (auto reason = framing_refusal(gen, cmd, framing)) return close_with(std::move(*reason));
  if (auto reason = refusal(model, cmd, limits)) return close_with(std::move(*reason));

  switch (cmd.op) {
    case Op::Validate:
      if (cmd.word != kValidateMagic)
        return close_with(fmt::format("bad VALIDATE magic 0x{:08x}", cmd.word));
      break;
    case Op::Ping:
      put_u32(out.reply, cmd.word);
      break;
    case Op::Set:
      model.set(cmd.keys[0], std::move(cmd.values[0]), out.effects);
      break;
    case Op::CompareSet:
      put_bytes(out.reply, model.compare_set(cmd.keys[0], cmd.values[0], std::move(cmd.values[1]),
                                             CompareSetWake::IfPresent, out.effects));
      break;
    case Op::Get: {
      const std::string* value = model.get(cmd.keys[0]);
      // The 1.13 server closes on a missing key; libuv answers an empty value.
      if (!value && gen == Generation::G1) return close_with("GET of a missing key");
      put_bytes(out.reply, value ? *value : std::string());
      break;
    }
    case Op::Add: {
      auto value = model.add(cmd.keys[0], cmd.number, out.effects);
      if (!value) return close_with("ADD to a value that is not a decimal integer");
      put_i64(out.reply, *value);
      break;
    }
    case Op::Check:
      put_u8(out.reply, model.check(cmd.keys) ? kCheckReady : kCheckNotReady);
      break;
    case Op::Wait:
      if (model.wait(client, cmd.keys)) put_u8(out.reply, kStopWaiting);
      break;
    case Op::GetNumKeys:
      put_i64(out.reply, model.num_keys());
      break;
    case Op::WatchKey:
      if (!model.watching(client, cmd.keys[0])) {
        if (model.watch_count(client) >= limits.max_watches_per_connection) {
          return close_with(fmt::format("more than {} watched keys on one connection",
                                        limits.max_watches_per_connection));
        }
        if (model.watch_total() >= limits.max_watches)
          return close_with(fmt::format("the store holds {} watches already", limits.max_watches));
        model.watch(client, cmd.keys[0]);
      }
      put_u8(out.reply, static_cast<std::uint8_t>(WatchEventType::CallbackRegistered));
      break;
    case Op::DeleteKey:
      put_i64(out.reply, model.delete_key(cmd.keys[0], out.effects) ? 1 : 0);
      break;
    case Op::Append:
      model.append(cmd.keys[0], cmd.values[0], out.effects);
      break;
    case Op::MultiGet:
      for (const auto& key : cmd.keys) {
        const std::string* value = model.get(key);
        put_bytes(out.reply, value ? *value : std::string());
      }
      break;
    case Op::MultiSet:
      for (std::size_t i = 0; i < cmd.keys.size(); ++i)
        model.set(cmd.keys[i], std::move(cmd.values[i]), out.effects);
      break;
    case Op::CancelWait:
      model.cancel_wait(client);
      put_u8(out.reply, kWaitCanceled);
      break;
    case Op::QueuePush:
      model.queue_push(cmd.keys[0], std::move(cmd.values[0]), out.effects);
      break;
    case Op::QueuePop: {
      std::int64_t length_before = 0;
      auto item = model.queue_pop(cmd.keys[0], length_before);
      put_i64(out.reply, length_before);
      if (item) put_bytes(out.reply, *item);
      break;
    }
    case Op::QueueLen:
      put_i64(out.reply, model.queue_len(cmd.keys[0]));
      break;
    case Op::ListKeys: {
      auto keys = model.list_keys();
      put_i64(out.reply, static_cast<std::int64_t>(keys.size()));
      for (const auto& key : keys) put_bytes(out.reply, key);
      break;
    }
    case Op::Tagged:
      out.tags_on = true;
      put_u8(out.reply, kTaggedOn);
      break;
    case Op::Unwatch:
      put_u8(out.reply, model.unwatch(client, cmd.keys[0]) ? 1 : 0);
      break;
    case Op::Probe:
      put_u8(out.reply, kProbeReplyTag);
      for (const auto& key : cmd.keys) put_u8(out.reply, model.check({key}) ? 1 : 0);
      break;
    case Op::Barrier: {
      auto done = model.barrier(client, cmd.keys[0], cmd.number, out.effects);
      if (!done) return close_with("BARRIER on a value that is not a decimal integer");
      if (*done) put_u8(out.reply, kStopWaiting);
      break;
    }
  }
  return out;
}

}  // namespace ddp::rdzv
