// SPDX-License-Identifier: MIT
#include "launcher/health/progress_tracker.hpp"

#include <algorithm>

namespace ddp::launcher::health {

const char* source_name(ProgressSource source) {
  switch (source) {
    case ProgressSource::Heartbeat:
      return "heartbeat";
    case ProgressSource::Output:
      return "output";
    case ProgressSource::Timer:
      return "timer";
  }
  return "?";
}

void ProgressTracker::start_attempt(const std::vector<int>& global_ranks, Clock::time_point now,
                                    bool other_nodes) {
  attempt_start_ = now;
  others_started_ = !other_nodes;
  std::vector<std::optional<ProgressSource>> shown(global_ranks.size());
  for (size_t i = 0; i < global_ranks.size() && i < ranks_.size(); ++i)
    shown[i] = best_of(ranks_[i]);
  ranks_.assign(global_ranks.size(), Rank{});
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    ranks_[i].rank = global_ranks[i];
    ranks_[i].started = now;
    ranks_[i].expected = shown[i];
  }
  std::fill(std::begin(seen_), std::end(seen_), false);
  elsewhere_.reset();
  elsewhere_best_step_.reset();
}

void ProgressTracker::record(size_t local_rank, ProgressSource source, Clock::time_point now,
                             std::optional<long long> step) {
  if (local_rank >= ranks_.size()) return;
  Rank& r = ranks_[local_rank];
  const auto s = static_cast<size_t>(source);
  seen_[s] = true;
  r.last[s] = now;
  if (source == ProgressSource::Heartbeat) {
    ++r.heartbeats;
    if (step) {
      r.step = step;
      if (!r.best_step || *step > *r.best_step) r.best_step = step;
    }
  }
}

void ProgressTracker::record_exit(size_t local_rank, Clock::time_point now) {
  if (local_rank >= ranks_.size()) return;
  ranks_[local_rank].alive = false;
  ranks_[local_rank].exited = now;
}

void ProgressTracker::record_elsewhere(Clock::time_point now, std::optional<long long> best_step,
                                       bool others_started) {
  elsewhere_ = now;
  others_started_ = others_started;
  if (best_step && (!elsewhere_best_step_ || *best_step > *elsewhere_best_step_)) {
    elsewhere_best_step_ = best_step;
  }
}

std::optional<ProgressSource> ProgressTracker::active_source() const {
  for (size_t s = 0; s < 3; ++s) {
    if (seen_[s]) return static_cast<ProgressSource>(s);
  }
  return std::nullopt;
}

Clock::time_point ProgressTracker::last_progress(size_t local_rank) const {
  const Rank& r = ranks_.at(local_rank);
  Clock::time_point t = r.started;
  if (auto source = active_source()) {
    // The active source and any better one (a better one would be active itself).
    const auto& last = r.last[static_cast<size_t>(*source)];
    if (last) t = std::max(t, *last);
  }
  if (r.exited) t = std::max(t, *r.exited);
  return t;
}

Clock::time_point ProgressTracker::job_last_progress() const {
  Clock::time_point latest{};
  for (size_t i = 0; i < ranks_.size(); ++i) latest = std::max(latest, last_progress(i));
  if (elsewhere_) latest = std::max(latest, *elsewhere_);
  return latest;
}

std::optional<ProgressSource> ProgressTracker::best_of(const Rank& r) {
  for (size_t s = 0; s < 3; ++s) {
    if (r.last[s]) return static_cast<ProgressSource>(s);
  }
  return std::nullopt;
}

bool ProgressTracker::local_ranks_started() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) {
    if (!r.alive) return true;
    const auto best = best_of(r);
    // Sources are ordered best first: the expected one or a better one.
    return best && (!r.expected || *best <= *r.expected);
  });
}

std::optional<long long> ProgressTracker::best_step() const {
  std::optional<long long> best;
  for (const auto& r : ranks_) {
    if (r.best_step && (!best || *r.best_step > *best)) best = r.best_step;
  }
  return best;
}

std::optional<long long> ProgressTracker::job_best_step() const {
  auto best = best_step();
  if (elsewhere_best_step_ && (!best || *elsewhere_best_step_ > *best)) best = elsewhere_best_step_;
  return best;
}

std::vector<size_t> ProgressTracker::alive_by_oldest_progress() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].alive) out.push_back(i);
  }
  std::stable_sort(out.begin(), out.end(),
                   [this](size_t a, size_t b) { return last_progress(a) < last_progress(b); });
  return out;
}

}  // namespace ddp::launcher::health
