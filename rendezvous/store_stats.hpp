#pragma once

// What a StoreServer has done and holds, for tests and for the launcher's /metrics (which formats
// it; rendezvous/ formats nothing for Prometheus). Plain data: no Asio.

#include <array>
#include <cstddef>
#include <cstdint>

#include "rendezvous/protocol.hpp"

namespace ddp::rdzv {

struct StoreServerStats {
  std::size_t connections = 0;  // open now
  std::size_t keys = 0;
  std::size_t pending_waits = 0;
  std::size_t watch_registrations = 0;
  std::size_t closed_for_errors = 0;     // connections closed because of a bad or oversize frame
  std::size_t buffered_input_bytes = 0;  // unfinished requests, all connections together
  std::size_t buffered_output_bytes =
      0;                        // output owed to peers not reading, all connections together
  std::size_t store_bytes = 0;  // what --max-store-bytes bounds
  // Since the server started:
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_refused = 0;           // at the connection limit
  std::array<std::uint64_t, kOpCount> requests{};  // decoded requests, by Op
};

}  // namespace ddp::rdzv
