// SPDX-License-Identifier: MIT
#pragma once
/// ZygoteStarter: PosixProcessControl's side of --preload. Keeps one zygote (zygote.hpp) for the
/// node and forks each worker it can serve from it. It never makes ddprun wait on the zygote
/// beyond Zygote::kReplyTimeout, and never fails a start: whatever goes wrong, that worker is
/// exec'd the usual way.
///
/// - begin()/settle(): the first imports, waited for by the caller's event loop (the returned
///   descriptor turns readable), bounded by --preload-timeout, given up on a signal.
/// - A zygote that died (reaped, or its socket closed during a fork or its imports) is replaced
///   at once by one that imports in the background; until it is ready, workers are exec'd. More
///   than kMaxDeathsInARow in a row that die before they are ready give the preload up.
/// - A zygote that refused, did not answer a request in time, answered nonsense, or whose
///   replacement did not import within --preload-timeout is given up for the run: workers are
///   exec'd and take_notice() says why, once.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "launcher/process/zygote.hpp"

namespace ddp::launcher {

class ZygoteStarter {
 public:
  explicit ZygoteStarter(ZygoteSetup setup) : setup_(std::move(setup)) {}

  /// Starts the zygote's imports: the descriptor that turns readable when it has answered, or
  /// the reason it cannot be used.
  std::variant<int, std::string> begin();
  /// After begin()'s descriptor turned readable, or with `give_up` (the timeout passed, or the
  /// run was interrupted): ready, or why not (the zygote is then gone and start() execs).
  std::variant<ZygoteReady, std::string> settle(const std::optional<std::string>& give_up);
  /// A worker forked from the zygote and not yet given its go-ahead (await_exec() gives it);
  /// nullopt when it is to be exec'd the usual way. Never an error.
  std::optional<Result<StartedProcess>> start(const SpawnRequest& request);
  /// waitpid(-1) reaped `pid`; if it was the zygote, another one starts importing.
  void on_reaped(pid_t pid);
  /// The live zygote's pid (-1: none): not a leftover of any attempt.
  pid_t pid() const { return zygote_ ? zygote_->pid() : -1; }
  /// Why the zygote was given up since the last call, once.
  std::optional<std::string> take_notice() { return std::exchange(notice_, std::nullopt); }

 private:
  enum class State { Off, Importing, Ready };
  /// A new zygote importing in the background, in place of one that died (`why`); false (and
  /// given up) if it cannot be started or too many died in a row before they were ready.
  bool respawn(const std::string& why);
  static constexpr int kMaxDeathsInARow = 3;
  void give_up(const std::string& why);
  ZygoteSetup setup_;
  std::unique_ptr<Zygote> zygote_;
  State state_ = State::Off;
  std::chrono::steady_clock::time_point import_deadline_{};
  std::optional<std::string> notice_;
  int deaths_in_a_row_ = 0;  // zygotes that died since the last one was ready
};

}  // namespace ddp::launcher
