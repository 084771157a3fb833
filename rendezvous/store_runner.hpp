#pragma once

// Run a StoreServer in the foreground until SIGINT/SIGTERM: what `ddprun-store` and
// `ddprun --store-only` do. Prints the port as the first line of `out`.

#include <sys/resource.h>

#include <optional>
#include <ostream>

#include "rendezvous/store_server.hpp"

namespace ddp::rdzv {

// Thousands of clients need thousands of descriptors; the soft RLIMIT_NOFILE is often far below
// the hard one. Raises it to the hard one; returns the soft limit before, if it changed.
std::optional<rlim_t> raise_fd_limit();

// Returns the process exit code: 0 after a signal, 1 if the port could not be bound (the reason
// is printed on stderr as one line).
int run_store_until_signal(const StoreServerOptions& opts, std::ostream& out);

}  // namespace ddp::rdzv
