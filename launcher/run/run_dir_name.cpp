// SPDX-License-Identifier: MIT
// The run directory's name for a job id (pure; declared in run_directory.hpp). In the core library
// because the dry run prints it too.
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "launcher/run/run_directory.hpp"

namespace ddp::launcher {

std::string run_dir_name(const std::string& run_id) {
  std::string name = run_id;
  for (char& c : name) {
    const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (!plain) c = '_';
  }
  if (name.size() <= kRunDirNameMax) return name;
  // A directory entry holds at most 255 bytes and mkdtemp adds "_XXXXXX": keep a readable head
  // and tell long ids that share it apart by a hash of the whole id (FNV-1a, 64 bits).
  std::uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : run_id) hash = (hash ^ c) * 1099511628211ull;
  return fmt::format("{}-{:016x}", name.substr(0, kRunDirNameMax - 17), hash);
}

}  // namespace ddp::launcher
