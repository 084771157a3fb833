// SPDX-License-Identifier: MIT
#pragma once
/// JoinProgress: while a join waits for the other nodes, one line every few seconds on stderr
/// saying who arrived and who is missing (docs/launcher.md). On a terminal it is one line that
/// rewrites itself and is cleared once the round formed; otherwise plain lines. Never stdout.

#include <chrono>
#include <functional>
#include <string>

namespace ddp::launcher {

/// "waiting for the job's nodes (6 s): 1 of 2 node(s) arrived: a (node 0); missing node rank(s): 1"
std::string join_progress_text(std::chrono::milliseconds waited, const std::string& status);

class JoinProgress {
 public:
  /// `write` takes raw bytes for stderr; `terminal`: stderr is a terminal.
  JoinProgress(bool terminal, std::function<void(const std::string&)> write)
      : terminal_(terminal), write_(std::move(write)) {}
  void show(std::chrono::milliseconds waited, const std::string& status);
  /// The join ended (formed or failed): a terminal's line is cleared.
  void done();

 private:
  bool terminal_;
  std::function<void(const std::string&)> write_;
  bool showing_ = false;
};

}  // namespace ddp::launcher
