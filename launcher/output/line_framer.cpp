// SPDX-License-Identifier: MIT
#include "launcher/output/line_framer.hpp"

#include <algorithm>
#include <cstring>

namespace ddp::launcher {

void LineFramer::append_line(std::string& out, std::string_view head, std::string_view rest) const {
  bool prefixed = false;
  if (!plain_prefix_.empty() && head.size() + rest.size() >= plain_prefix_.size()) {
    const size_t in_head = std::min(head.size(), plain_prefix_.size());
    prefixed = head.substr(0, in_head) == std::string_view(plain_prefix_).substr(0, in_head) &&
               rest.substr(0, plain_prefix_.size() - in_head) ==
                   std::string_view(plain_prefix_).substr(in_head);
  }
  if (!prefixed) out += prefix_;
  out += head;
  out += rest;
}

void LineFramer::open_long_line(std::string& out) {
  append_line(out, carry_, {});
  carry_.clear();
  open_ = true;
}

size_t LineFramer::frame(std::string_view chunk, std::string& out) {
  size_t lines = 0;
  const char* p = chunk.data();
  const char* end = p + chunk.size();
  if (open_) {
    // The rest of a long line: passed on as it comes, unchanged, up to its newline.
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) {
      out.append(p, end);
      return lines;
    }
    out.append(p, nl + 1);
    open_ = false;
    ++lines;
    p = nl + 1;
  } else if (!carry_.empty()) {
    // The first line may continue what the previous chunk left over.
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) {
      carry_.append(p, end);
      if (carry_.size() >= kMaxLineBytes) open_long_line(out);
      return lines;
    }
    append_line(out, carry_, std::string_view(p, nl + 1 - p));
    carry_.clear();
    ++lines;
    p = nl + 1;
  }
  // memchr over the chunk: one pass, no per-byte branching in our code.
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) break;
    append_line(out, std::string_view(p, nl + 1 - p), {});
    ++lines;
    p = nl + 1;
  }
  if (p < end) {
    carry_.assign(p, end);
    if (carry_.size() >= kMaxLineBytes) open_long_line(out);
  }
  return lines;
}

size_t LineFramer::finish(std::string& out) {
  if (open_) {
    out += '\n';
    open_ = false;
    return 1;
  }
  if (carry_.empty()) return 0;
  append_line(out, carry_, "\n");
  carry_.clear();
  return 1;
}

size_t LineFramer::cut(std::string& out) {
  if (!open_) return 0;
  out += '\n';
  open_ = false;
  ++cuts_;
  return 1;
}

}  // namespace ddp::launcher
