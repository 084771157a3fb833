// SPDX-License-Identifier: MIT
#include "launcher/health/failure_log.hpp"

namespace ddp::launcher::health {

void FailureLog::add(RankFailure f) {
  if (keep_ == 0) return;
  if (f.message.size() > kMaxFailureMessage) f.message.resize(kMaxFailureMessage);
  if (f.traceback.size() > kMaxFailureTraceback) {
    f.traceback.erase(0, f.traceback.size() - kMaxFailureTraceback);
  }
  if (f.stderr_tail.size() > kMaxFailureTailLines) {
    f.stderr_tail.erase(f.stderr_tail.begin(),
                        f.stderr_tail.end() - static_cast<long>(kMaxFailureTailLines));
  }
  for (auto& line : f.stderr_tail) {
    if (line.size() > kMaxFailureTailLine) line.resize(kMaxFailureTailLine);
  }
  if (f.cause.size() > kMaxFailureCause) f.cause.resize(kMaxFailureCause);
  kept_.push_back(std::move(f));
  while (kept_.size() > keep_) {
    kept_.pop_front();
    ++dropped_;
  }
}

void FailureLog::settle(int attempt, const AttemptCause& cause) {
  for (auto& f : kept_) {
    if (f.attempt != attempt) continue;
    f.root_cause = cause.rank >= 0 && f.node_rank == cause.node_rank && f.rank == cause.rank;
    f.cause_node = f.root_cause ? -1 : cause.node_rank;
    f.cause_rank = f.root_cause ? -1 : cause.rank;
    f.cause = f.root_cause ? std::string() : cause.text.substr(0, kMaxFailureCause);
  }
}

nlohmann::json failure_cause_json(const RankFailure& f) {
  if (f.root_cause || (f.cause_node < 0 && f.cause_rank < 0 && f.cause.empty())) return nullptr;
  return {{"node_rank", f.cause_node >= 0 ? nlohmann::json(f.cause_node) : nlohmann::json()},
          {"rank", f.cause_rank >= 0 ? nlohmann::json(f.cause_rank) : nlohmann::json()},
          {"text", f.cause}};
}

nlohmann::json FailureLog::json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : kept_) {
    out.push_back({{"attempt", f.attempt},
                   {"rank", f.rank},
                   {"local_rank", f.local_rank},
                   {"exit", f.exit},
                   {"message", f.message},
                   {"traceback", f.traceback},
                   {"stderr_tail", f.stderr_tail}});
    if (f.node_rank >= 0) out.back()["node_rank"] = f.node_rank;
    out.back()["root_cause"] = f.root_cause;
    out.back()["caused_by"] = failure_cause_json(f);
  }
  return out;
}

}  // namespace ddp::launcher::health
