#pragma once

// Run a StoreServer in the foreground until SIGINT/SIGTERM: what `ddprun-store` and
// `ddprun --store-only` do. Prints the port as the first line of `out`.

#include <ostream>

#include "rendezvous/store_server.hpp"

namespace ddp::rdzv {

// Returns the process exit code: 0 after a signal, 1 if the port could not be bound (the reason
// is printed on stderr as one line).
int run_store_until_signal(const StoreServerOptions& opts, std::ostream& out);

}  // namespace ddp::rdzv
