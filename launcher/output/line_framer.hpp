// SPDX-License-Identifier: MIT
#pragma once
/// LineFramer: turns an arbitrary byte stream (pipe reads) into whole lines with a prefix.
/// Pure. Bytes after the last newline wait for the next chunk, so no line is ever split
/// between two writes; finish() emits what is left as a final line.
///
/// A line that already starts with the prefix's text (`plain_prefix`, the prefix without
/// color) gets no second one: torch 2.x prefixes its own log lines and tracebacks with
/// "[rank<N>]:", the same as ddprun's default.

#include <cstddef>
#include <string>
#include <string_view>

namespace ddp::launcher {

class LineFramer {
 public:
  /// A line longer than this (no newline for 1 MiB) is emitted in pieces, each ending in '\n';
  /// this bounds memory when a worker writes binary junk. cuts() counts them.
  static constexpr size_t kMaxLineBytes = 1 << 20;

  explicit LineFramer(std::string prefix = {}, std::string plain_prefix = {})
      : prefix_(std::move(prefix)), plain_prefix_(std::move(plain_prefix)) {}

  /// Appends prefix+line for every complete line in `chunk` (with what was carried before)
  /// to `out`. Returns the number of complete lines appended.
  size_t frame(std::string_view chunk, std::string& out);

  /// Appends the pending partial line, if any, with a '\n' added. Returns 1 if it did.
  size_t finish(std::string& out);

  /// Bytes waiting for their newline.
  size_t pending() const { return carry_.size(); }
  const std::string& prefix() const { return prefix_; }
  /// Lines cut because they were longer than kMaxLineBytes.
  size_t cuts() const { return cuts_; }

 private:
  /// Appends the line `head` + `rest` (rest ends in '\n' or the caller adds one) with the prefix,
  /// unless it already starts with plain_prefix_.
  void append_line(std::string& out, std::string_view head, std::string_view rest) const;

  std::string prefix_;
  std::string plain_prefix_;
  std::string carry_;
  size_t cuts_ = 0;
};

}  // namespace ddp::launcher
