// SPDX-License-Identifier: MIT
#pragma once
/// The rendezvous token is the agents' secret (docs/launcher.md#multi-node): workers and other
/// local users must not read it in /proc/<ddprun>/environ or /proc/<ddprun>/cmdline. Those files
/// show the memory the kernel laid out at exec, not getenv()'s view, so ddprun overwrites the
/// secret there once it has a copy. Call once, first thing in main (no threads yet).

#include <cstddef>
#include <string>

namespace ddp::launcher {

/// Copies DDPRUN_RDZV_TOKEN and PET_RDZV_CONF into the heap (getenv() still finds them) and
/// zeroes their values where /proc/self/environ reads them; then masks the token of every
/// --rdzv_conf argument in argv's memory, where /proc/self/cmdline reads it. `own_args`: how many
/// of argv[1..] are ddprun's (the program and its arguments follow, untouched).
void scrub_secrets_from_proc(int argc, char** argv, size_t own_args);

}  // namespace ddp::launcher
