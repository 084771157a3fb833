// SPDX-License-Identifier: MIT
#pragma once
/// `ddprun --store-only [--master_addr A] [--master_port P]`: serve the job's store and nothing
/// else until SIGINT/SIGTERM (for tests, and for users who host the store themselves). Its own
/// small command line, so the launch options stay as they are.

namespace ddp::launcher {

/// True when argv asks for --store-only (before the program, if any).
bool wants_store_only(int argc, char** argv);

/// Prints the port as the first stdout line; exit 0 after a signal, 69 if the port is taken,
/// 2 for a bad option.
int run_store_only(int argc, char** argv);

}  // namespace ddp::launcher
