// SPDX-License-Identifier: MIT
#include "launcher/process/zygote_starter.hpp"

#include <fmt/format.h>

namespace ddp::launcher {

std::variant<ZygoteReady, std::string> ZygoteStarter::begin() {
  auto made = Zygote::start(setup_);
  if (auto* reason = std::get_if<std::string>(&made)) return *reason;
  zygote_ = std::move(std::get<std::unique_ptr<Zygote>>(made));
  enabled_ = true;
  return ZygoteReady{zygote_->import_seconds()};
}

bool ZygoteStarter::respawn() {
  zygote_.reset();  // kills and reaps what is left of the old one
  auto made = Zygote::start(setup_);
  if (auto* reason = std::get_if<std::string>(&made)) {
    enabled_ = false;
    notice_ =
        fmt::format("the preloaded interpreter died and could not be restarted ({})", *reason);
    return false;
  }
  zygote_ = std::move(std::get<std::unique_ptr<Zygote>>(made));
  return true;
}

std::optional<Result<StartedProcess>> ZygoteStarter::start(const SpawnRequest& request) {
  auto program = parse_python_invocation(request.argv);
  const bool can_serve = program && zygote_can_serve(setup_.workers, *program) &&
                         all_utf8(request.argv) && all_utf8(request.envp);
  switch (choose_worker_start(enabled_, zygote_ != nullptr, can_serve)) {
    case WorkerStart::Exec:
      return std::nullopt;
    case WorkerStart::RespawnThenFork:
      if (!respawn()) return std::nullopt;
      break;
    case WorkerStart::Fork:
      break;
  }
  auto started = zygote_->fork_worker(request, *program);
  if (started) return started;
  // It died since the last reap (SIGKILLed between two attempts): one fresh zygote, one retry.
  if (!respawn()) return std::nullopt;
  return zygote_->fork_worker(request, *program);
}

void ZygoteStarter::on_reaped(pid_t pid) {
  if (zygote_ && pid == zygote_->pid()) {
    zygote_->reaped();
    zygote_.reset();
  }
}

}  // namespace ddp::launcher
