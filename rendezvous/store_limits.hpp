#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ddp::rdzv {

// Caps applied to every request before any memory is reserved for it. The wire format trusts
// lengths (the 1.13 server tries to allocate whatever a peer announces), so these are the only
// thing standing between a stray scanner and an out-of-memory kill.
struct StoreLimits {
  std::size_t max_key_bytes = std::size_t{64} * 1024;  // libuv uses 8 KiB; 1.13 had no cap
  // 1.13 users store pickles; libuv uses 8 MiB.
  std::size_t max_value_bytes = std::size_t{128} * 1024 * 1024;
  std::size_t max_keys_per_request = 131072;  // CHECK/WAIT/MULTI_GET/MULTI_SET (libuv value)
  // One decoded request, all fields together.
  std::size_t max_request_bytes = std::size_t{256} * 1024 * 1024;
  std::size_t max_connections = 65536;
  // All connections' partly received requests together (bytes of unfinished frames, and input
  // held back while a connection's replies are not being read). When a read takes the total
  // past this, the connection holding the most of it is closed.
  std::size_t max_total_input_bytes = std::size_t{1} << 30;
  // Replies and notifications owed to one connection: past this, the server stops reading its
  // requests; a message that arrives for it while it is past this (a watch notification, a
  // wake-up) closes it instead of growing the queue.
  std::size_t max_pending_output_bytes = std::size_t{64} * 1024 * 1024;
  // All connections' owed output together; past it, the connection owed the most is closed.
  std::size_t max_total_output_bytes = std::size_t{1} << 30;
  // One reply (MULTI_GET, LIST_KEYS): a request whose reply would be larger closes its connection
  // before the reply is built.
  std::size_t max_reply_bytes = std::size_t{256} * 1024 * 1024;
  // The store's contents: keys (map keys and queue names) and everything it holds, i.e. keys,
  // values, queue items and the keys of pending WAITs and watches, each counted with a fixed
  // per-entry overhead (StoreModel::kEntryOverheadBytes). A request that would go past either
  // closes its connection and changes nothing.
  std::size_t max_keys = std::size_t{1024} * 1024;
  // WATCH_KEY registrations (G1 watches, a proxy's tagged watches): a connection's repeated
  // WATCH_KEY of one key is one registration; past either bound the connection is closed. A
  // store proxy watches at most its --max-watched-keys (proxy/store_proxy.hpp) on its one link.
  std::size_t max_watches_per_connection = std::size_t{256} * 1024;
  std::size_t max_watches = std::size_t{4} * 1024 * 1024;
  std::size_t max_store_bytes = std::size_t{2} << 30;
  // A connection in the middle of a request, or owed output, that makes no progress (no byte
  // read or written) for this long is closed. Connections between requests (a client blocked in
  // WAIT, an idle worker) are never timed out. 0 disables.
  std::chrono::milliseconds idle_timeout{30000};
};

}  // namespace ddp::rdzv
