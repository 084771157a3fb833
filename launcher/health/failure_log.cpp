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
  kept_.push_back(std::move(f));
  while (kept_.size() > keep_) {
    kept_.pop_front();
    ++dropped_;
  }
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
  }
  return out;
}

}  // namespace ddp::launcher::health
