// SPDX-License-Identifier: MIT
#pragma once
/// `ddprun --store-only [--master_addr A] [--master_port P]`: serve the job's store and nothing
/// else until SIGINT/SIGTERM (for tests, and for users who host a c10d store themselves).

#include "launcher/config/raw_options.hpp"

namespace ddp::launcher {

/// Prints the port as the first stdout line; exit 0 after a signal, 69 if the port is taken, 2
/// for a bad address or port.
int run_store_only(const RawOptions& raw);

}  // namespace ddp::launcher
