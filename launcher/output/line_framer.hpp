// SPDX-License-Identifier: MIT
#pragma once
/// LineFramer: turns an arbitrary byte stream (pipe reads) into whole lines with a prefix.
/// Pure. Bytes after the last newline wait for the next chunk, so no line is ever split
/// between two writes; finish() emits what is left as a final line.
///
/// A line longer than kMaxLineBytes is not held whole (memory): from then on it is passed on as
/// it comes, unchanged, until its newline; line_open() says the output so far ends inside such a
/// line, and the caller keeps other writers out of the console meanwhile (OutputSink::write_lines).
/// cut() ends an open line early (a newline added; the rest starts a new line).
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
  /// A line longer than this (no newline for 1 MiB) is passed on as it comes (line_open()).
  static constexpr size_t kMaxLineBytes = 1 << 20;

  explicit LineFramer(std::string prefix = {}, std::string plain_prefix = {})
      : prefix_(std::move(prefix)), plain_prefix_(std::move(plain_prefix)) {}

  /// Appends prefix+line for every complete line in `chunk` (with what was carried before)
  /// to `out`. Returns the number of complete lines appended.
  size_t frame(std::string_view chunk, std::string& out);

  /// Appends the pending partial line, if any, with a '\n' added (an open line gets its '\n').
  /// Returns 1 if it did.
  size_t finish(std::string& out);
  /// What was appended so far ends inside a long line that has not reached its newline.
  bool line_open() const { return open_; }
  /// Ends an open line now with a '\n' (counted in cuts()); the bytes after it start a new line.
  size_t cut(std::string& out);

  /// Bytes waiting for their newline.
  size_t pending() const { return carry_.size(); }
  const std::string& prefix() const { return prefix_; }
  /// Long lines ended early by cut().
  size_t cuts() const { return cuts_; }

 private:
  /// Appends the line `head` + `rest` (rest ends in '\n' or the caller adds one) with the prefix,
  /// unless it already starts with plain_prefix_.
  void append_line(std::string& out, std::string_view head, std::string_view rest) const;

  std::string prefix_;
  std::string plain_prefix_;
  /// carry_ reached kMaxLineBytes: it goes out now, and the line stays open.
  void open_long_line(std::string& out);

  std::string carry_;
  bool open_ = false;
  size_t cuts_ = 0;
};

}  // namespace ddp::launcher
