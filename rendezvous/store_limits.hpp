#pragma once

#include <cstddef>
#include <cstdint>

namespace ddp::rdzv {

// Caps applied to every request before any memory is reserved for it. The wire format trusts
// lengths (the 1.13 server tries to allocate whatever a peer announces), so these are the only
// thing standing between a stray scanner and an out-of-memory kill.
struct StoreLimits {
  std::size_t max_key_bytes = 64 * 1024;            // libuv uses 8 KiB; 1.13 had no cap
  std::size_t max_value_bytes = 128 * 1024 * 1024;  // 1.13 users store pickles; libuv uses 8 MiB
  std::size_t max_keys_per_request = 131072;        // CHECK/WAIT/MULTI_GET/MULTI_SET (libuv value)
  std::size_t max_request_bytes = 256 * 1024 * 1024;  // one decoded request, all fields together
  std::size_t max_connections = 65536;
  // All connections' partly received requests together. Per-connection caps alone would let many
  // connections each park a large half-sent value; past this total, a connection holding more than
  // 64 KiB of unfinished input is closed instead of growing the server further.
  std::size_t max_total_input_bytes = std::size_t{1} << 30;
  // A client that stops reading while we owe it replies: stop reading its requests once this
  // much output is queued, so one stalled peer cannot grow the server without bound.
  std::size_t max_pending_output_bytes = 64 * 1024 * 1024;
};

}  // namespace ddp::rdzv
