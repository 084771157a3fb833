// SPDX-License-Identifier: MIT
#include "launcher/output/line_framer.hpp"

#include <cstring>

namespace ddp::launcher {

size_t LineFramer::frame(std::string_view chunk, std::string& out) {
  size_t lines = 0;
  const char* p = chunk.data();
  const char* end = p + chunk.size();
  // The first line may continue what the previous chunk left over.
  if (!carry_.empty()) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) {
      carry_.append(p, end);
      if (carry_.size() >= kMaxLineBytes) {
        out += prefix_;
        out += carry_;
        out += '\n';
        carry_.clear();
        ++lines;
      }
      return lines;
    }
    out += prefix_;
    out += carry_;
    out.append(p, nl + 1);
    carry_.clear();
    ++lines;
    p = nl + 1;
  }
  // memchr over the chunk: one pass, no per-byte branching in our code.
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) break;
    out += prefix_;
    out.append(p, nl + 1);
    ++lines;
    p = nl + 1;
  }
  if (p < end) {
    carry_.assign(p, end);
    if (carry_.size() >= kMaxLineBytes) lines += finish(out);
  }
  return lines;
}

size_t LineFramer::finish(std::string& out) {
  if (carry_.empty()) return 0;
  out += prefix_;
  out += carry_;
  out += '\n';
  carry_.clear();
  return 1;
}

}  // namespace ddp::launcher
