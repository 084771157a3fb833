// libFuzzer entry (optional: -DDDPRUN_RDZV_LIBFUZZER=ON with clang): the input's first byte picks
// the generation, the rest is one connection's byte stream. Every decoded request must re-encode
// to the same bytes and is then applied to a StoreModel through the command handler, so the
// decoder, the handler and the model are fuzzed together without sockets.
//
//   build/bin/rdzv_libfuzzer -max_total_time=60

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "rendezvous/command_handler.hpp"

using namespace ddp::rdzv;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  StoreLimits limits;
  limits.max_key_bytes = 256;
  limits.max_value_bytes = 4096;
  limits.max_keys_per_request = 16;
  limits.max_request_bytes = 16384;
  const Generation gen = (data[0] & 1) ? Generation::G2 : Generation::G1;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  StoreModel model;
  bool first = true;
  const ClientId me = 1;
  while (!stream.empty()) {
    const DecodeResult r = decode_request(stream, gen, limits);
    if (r.status != DecodeStatus::Ok) break;
    if (encode_request(gen, r.command) != stream.substr(0, r.consumed)) std::abort();
    const Outcome out = handle_command(model, me, gen, Command(r.command), first);
    first = false;
    if (out.close_reason) break;
    stream.remove_prefix(r.consumed);
  }
  model.remove_client(me);
  if (model.pending_wait_count() != 0 || model.watch_registration_count() != 0) std::abort();
  return 0;
}
