// SPDX-License-Identifier: MIT
#pragma once
/// LineFramer: turns an arbitrary byte stream (pipe reads) into whole lines with a prefix.
/// Pure. Bytes after the last newline wait for the next chunk, so no line is ever split
/// between two writes; finish() emits what is left as a final line.

#include <cstddef>
#include <string>
#include <string_view>

namespace ddp::launcher {

class LineFramer {
 public:
  /// A line longer than this (no newline for 1 MiB) is emitted in pieces, each ending in '\n';
  /// this bounds memory when a worker writes binary junk.
  static constexpr size_t kMaxLineBytes = 1 << 20;

  explicit LineFramer(std::string prefix = {}) : prefix_(std::move(prefix)) {}

  /// Appends prefix+line for every complete line in `chunk` (with what was carried before)
  /// to `out`. Returns the number of complete lines appended.
  size_t frame(std::string_view chunk, std::string& out);

  /// Appends the pending partial line, if any, with a '\n' added. Returns 1 if it did.
  size_t finish(std::string& out);

  /// Bytes waiting for their newline.
  size_t pending() const { return carry_.size(); }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::string carry_;
};

}  // namespace ddp::launcher
