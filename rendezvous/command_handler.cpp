#include "rendezvous/command_handler.hpp"

#include <fmt/format.h>

namespace ddp::rdzv {
namespace {

Outcome close_with(std::string reason) {
  Outcome out;
  out.close_reason = std::move(reason);
  return out;
}

}  // namespace

Outcome handle_command(StoreModel& model, ClientId client, Generation gen, Command&& cmd, bool first_request) {
  Outcome out;
  // A 1.13 client sends no CANCEL: a new request while its WAIT is still registered means that
  // wait timed out on the client side. Drop it so no stray STOP_WAITING desynchronises the
  // connection later.
  if (gen == Generation::G1 && model.has_pending_wait(client)) model.cancel_wait(client);

  if (gen == Generation::G2 && first_request != (cmd.op == Op::Validate)) {
    return close_with(first_request ? "first request is not VALIDATE" : "VALIDATE after the first request");
  }

  switch (cmd.op) {
    case Op::Validate:
      if (cmd.word != kValidateMagic) return close_with(fmt::format("bad VALIDATE magic 0x{:08x}", cmd.word));
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
      model.watch(client, cmd.keys[0]);
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
      for (std::size_t i = 0; i < cmd.keys.size(); ++i) model.set(cmd.keys[i], std::move(cmd.values[i]), out.effects);
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
