// SPDX-License-Identifier: MIT
#include "launcher/multinode/join_progress.hpp"

#include <fmt/format.h>

#include "launcher/common/terminal_text.hpp"

namespace ddp::launcher {

std::string join_progress_text(std::chrono::milliseconds waited, const std::string& status) {
  // The status names other nodes' hosts: a name holding an escape is shown, not obeyed.
  return fmt::format("ddprun: waiting for the job's nodes ({} s): {}",
                     std::chrono::duration_cast<std::chrono::seconds>(waited).count(),
                     visible_line(status));
}

void JoinProgress::show(std::chrono::milliseconds waited, const std::string& status) {
  const std::string text = join_progress_text(waited, status);
  if (terminal_) {
    write_("\r\x1b[K" + text);  // the same line, rewritten
    showing_ = true;
  } else {
    write_(text + "\n");
  }
}

void JoinProgress::done() {
  if (showing_) write_("\r\x1b[K");
  showing_ = false;
}

}  // namespace ddp::launcher
