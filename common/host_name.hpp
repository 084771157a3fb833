// SPDX-License-Identifier: MIT
#pragma once
/// This machine's name, as ddprun names its node (messages, --exclude-hosts, events) and as the
/// rendezvous names a node that was given none. Below launcher/ and rendezvous/: both use it.

#include <unistd.h>

#include <string>

namespace ddp {

/// gethostname(2); "localhost" when it fails or gives an empty name (a bare container), so a
/// node is never named "".
inline std::string host_name() {
  char name[256] = {};  // the last byte stays 0: a name cut at the buffer's end is terminated
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace ddp
