// SPDX-License-Identifier: MIT
#pragma once
/// ZygoteStarter: PosixProcessControl's side of --preload. Keeps one zygote (zygote.hpp) for the
/// node, forks each worker it can serve from it, respawns it when it died, and gives it up (the
/// workers are exec'd again) when a respawn is refused.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "launcher/process/zygote.hpp"

namespace ddp::launcher {

class ZygoteStarter {
 public:
  explicit ZygoteStarter(ZygoteSetup setup) : setup_(std::move(setup)) {}

  /// Starts the zygote: ready, or the reason it cannot be used.
  std::variant<ZygoteReady, std::string> begin();
  /// A worker forked from the zygote; nullopt when it is to be exec'd the usual way.
  std::optional<Result<StartedProcess>> start(const SpawnRequest& request);
  /// waitpid(-1) reaped `pid`; if it was the zygote, the next start() respawns it.
  void on_reaped(pid_t pid);
  /// The live zygote's pid (-1: none): not a leftover of any attempt.
  pid_t pid() const { return zygote_ ? zygote_->pid() : -1; }
  /// Why the zygote was given up since the last call, once.
  std::optional<std::string> take_notice() { return std::exchange(notice_, std::nullopt); }

 private:
  bool respawn();
  ZygoteSetup setup_;
  std::unique_ptr<Zygote> zygote_;
  bool enabled_ = false;
  std::optional<std::string> notice_;
};

}  // namespace ddp::launcher
