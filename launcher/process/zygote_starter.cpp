// SPDX-License-Identifier: MIT
#include "launcher/process/zygote_starter.hpp"

#include <fmt/format.h>

namespace ddp::launcher {
namespace {

/// Spawns a zygote, has the caller adopt it, and starts its imports.
std::variant<std::unique_ptr<Zygote>, std::string> launch(const ZygoteSetup& setup) {
  auto made = Zygote::spawn(setup);
  if (auto* reason = std::get_if<std::string>(&made)) return *reason;
  auto zygote = std::move(std::get<std::unique_ptr<Zygote>>(made));
  if (setup.on_spawned) setup.on_spawned(zygote->pid());
  if (auto why = zygote->begin_imports(setup)) return *why;
  return zygote;
}

}  // namespace

std::variant<int, std::string> ZygoteStarter::begin() {
  auto made = launch(setup_);
  if (auto* reason = std::get_if<std::string>(&made)) return *reason;
  zygote_ = std::move(std::get<std::unique_ptr<Zygote>>(made));
  state_ = State::Importing;
  import_deadline_ = std::chrono::steady_clock::now() + setup_.ready_timeout;
  return zygote_->socket_fd();
}

std::variant<ZygoteReady, std::string> ZygoteStarter::settle(
    const std::optional<std::string>& give_up_why) {
  if (state_ != State::Importing || !zygote_) return std::string("no preloaded interpreter");
  auto greeting = zygote_->poll_greeting();
  if (!greeting) greeting = give_up_why.value_or("no answer yet");
  if (auto* reason = std::get_if<std::string>(&*greeting)) {
    zygote_.reset();
    state_ = State::Off;
    return *reason;
  }
  state_ = State::Ready;
  return std::get<ZygoteReady>(*greeting);
}

void ZygoteStarter::give_up(const std::string& why) {
  zygote_.reset();  // kills it, what it started and any worker it forked that was not claimed
  state_ = State::Off;
  notice_ = why;
}

bool ZygoteStarter::respawn(const std::string& why) {
  zygote_.reset();
  if (++deaths_in_a_row_ > kMaxDeathsInARow) {
    give_up(
        fmt::format("the preloaded interpreter died {} times in a row without forking a "
                    "worker ({})",
                    deaths_in_a_row_, why));
    return false;
  }
  auto made = launch(setup_);
  if (auto* reason = std::get_if<std::string>(&made)) {
    give_up(fmt::format("the preloaded interpreter died and could not be restarted ({})", *reason));
    return false;
  }
  zygote_ = std::move(std::get<std::unique_ptr<Zygote>>(made));
  state_ = State::Importing;
  import_deadline_ = std::chrono::steady_clock::now() + setup_.ready_timeout;
  return true;
}

std::optional<Result<StartedProcess>> ZygoteStarter::start(const SpawnRequest& request) {
  if (state_ == State::Off) return std::nullopt;
  auto program = parse_python_invocation(request.argv);
  if (!program || !zygote_can_serve(setup_.workers, *program) || !all_utf8(request.argv) ||
      !all_utf8(request.envp)) {
    return std::nullopt;
  }
  if (state_ == State::Importing) {  // a replacement: forks once it is ready, never waited for
    auto greeting = zygote_->poll_greeting();
    if (!greeting) {
      if (std::chrono::steady_clock::now() < import_deadline_) return std::nullopt;
      give_up(
          fmt::format("the preloaded interpreter died and its replacement did not import "
                      "within {:.3g} s",
                      setup_.ready_timeout.count() / 1000.0));
      return std::nullopt;
    }
    if (auto* reason = std::get_if<std::string>(&*greeting)) {
      if (zygote_->hung_up()) {
        respawn(
            *reason);  // it died importing (killed, OOM): another one, a bounded number of times
      } else {
        give_up(fmt::format("the preloaded interpreter died and could not be restarted ({})",
                            *reason));  // a refusal: the next one would refuse too
      }
      return std::nullopt;
    }
    state_ = State::Ready;
    deaths_in_a_row_ = 0;
  }
  auto forked = zygote_->fork_worker(request, *program);
  if (auto* started = std::get_if<StartedProcess>(&forked)) return *started;
  const auto failure = std::get<Zygote::ForkFailure>(forked);
  if (failure.died) {
    respawn(failure.why);  // this worker is exec'd; the next start may fork again
  } else {
    give_up(failure.why);
  }
  return std::nullopt;
}

void ZygoteStarter::on_reaped(pid_t pid) {
  if (!zygote_ || pid != zygote_->pid()) return;
  zygote_->reaped();
  // Importing: its socket says so (EOF) to settle() (the first one: given up) or start() (a
  // replacement: replaced again, a bounded number of times).
  if (state_ == State::Ready) respawn("it died");  // in the background: ready by the next start
}

}  // namespace ddp::launcher
