#include "rendezvous/proxy/wait_table.hpp"

#include <algorithm>
#include <stdexcept>

namespace ddp::rdzv::proxy {

bool WaitTable::add(std::uint64_t id, const std::vector<std::string>& keys) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(keys.size());
  std::vector<std::string> unique;
  unique.reserve(keys.size());
  std::size_t fresh = 0;
  for (const auto& k : keys) {
    if (!seen.insert(k).second) continue;
    unique.push_back(k);
    if (!watched_.contains(k)) ++fresh;
  }
  if (watched_.size() + fresh > max_watched_) return false;
  for (const auto& k : unique) {
    if (watched_.insert(k).second) to_watch_.push_back(k);
  }
  waits_[id] = Wait{std::move(unique), 0, false};
  unbatched_.push_back(id);
  return true;
}

void WaitTable::cancel(std::uint64_t id) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return;
  if (it->second.armed) {
    for (const auto& k : it->second.keys) {
      auto a = armed_by_key_.find(k);
      if (a == armed_by_key_.end()) continue;
      a->second.erase(id);
      if (a->second.empty()) armed_by_key_.erase(a);
    }
  }
  waits_.erase(it);  // an id left in unbatched_ or probes_ is skipped when met
}

WaitTable::Batch WaitTable::take_batch(std::size_t max_probe_keys) {
  Batch b;
  b.watch = std::move(to_watch_);
  to_watch_.clear();
  std::vector<std::uint64_t> covered;
  std::vector<std::string> keys;
  std::unordered_set<std::string_view> seen;
  while (!unbatched_.empty()) {
    const auto id = unbatched_.front();
    auto it = waits_.find(id);
    if (it == waits_.end()) {  // cancelled before its PROBE
      unbatched_.pop_front();
      continue;
    }
    std::size_t adds = 0;
    for (const auto& k : it->second.keys) adds += seen.contains(k) ? 0 : 1;
    if (!covered.empty() && keys.size() + adds > max_probe_keys) break;
    unbatched_.pop_front();
    covered.push_back(id);
    for (const auto& k : it->second.keys)
      if (seen.insert(k).second) keys.push_back(k);
  }
  if (!covered.empty()) {
    b.has_probe = true;
    b.waits = covered.size();
    b.probe = keys;
    probes_.push_back(std::move(covered));
    probe_keys_.push_back(std::move(keys));
  }
  return b;
}

std::vector<std::uint64_t> WaitTable::on_probe_reply(const std::vector<bool>& exists) {
  if (probes_.empty()) throw std::runtime_error("PROBE reply without a PROBE");
  auto covered = std::move(probes_.front());
  auto keys = std::move(probe_keys_.front());
  probes_.pop_front();
  probe_keys_.pop_front();
  if (exists.size() != keys.size()) throw std::runtime_error("PROBE reply of the wrong length");
  std::unordered_set<std::string_view> present;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (exists[i]) present.insert(keys[i]);
  std::vector<std::uint64_t> done;
  for (auto id : covered) {
    auto it = waits_.find(id);
    if (it == waits_.end()) continue;
    auto& w = it->second;
    std::erase_if(w.keys, [&](const std::string& k) { return present.contains(k); });
    w.remaining = w.keys.size();
    if (w.remaining == 0) {
      done.push_back(id);
      waits_.erase(it);
      continue;
    }
    w.armed = true;
    for (const auto& k : w.keys) armed_by_key_[k].insert(id);
  }
  return done;
}

std::vector<std::uint64_t> WaitTable::on_event(const std::string& key, WatchEventType type) {
  std::vector<std::uint64_t> done;
  auto it = armed_by_key_.find(key);
  if (it == armed_by_key_.end()) {
    ++idle_events_;
    ++idle_events_since_shed_;
    return done;
  }
  // A deletion answers nothing (a key seen existing stays seen, as with the root's own WAIT).
  if (type != WatchEventType::KeyCreated && type != WatchEventType::KeyUpdated) return done;
  auto ids = std::move(it->second);
  armed_by_key_.erase(it);
  for (auto id : ids) {
    auto w = waits_.find(id);
    if (w == waits_.end()) continue;
    // Each key of a WAIT is distinct and leaves armed_by_key_ when seen: counted once.
    if (--w->second.remaining == 0) {
      done.push_back(id);
      waits_.erase(w);
    }
  }
  std::sort(done.begin(), done.end());  // answered in arrival order
  return done;
}

bool WaitTable::unwatch_due() const {
  const bool many = watched_.size() * 2 > max_watched_ && watched_.size() > watched_after_shed_;
  return many || idle_events_since_shed_ > kIdleEventsBeforeShedding;
}

std::vector<std::string> WaitTable::take_unwatch() {
  std::unordered_set<std::string_view> needed;
  for (const auto& [id, wait] : waits_)
    for (const auto& key : wait.keys) needed.insert(key);
  for (const auto& key : to_watch_) needed.insert(key);  // its WATCH_KEY is not even sent yet
  std::vector<std::string> idle;
  for (const auto& key : watched_)
    if (!needed.contains(key)) idle.push_back(key);
  for (const auto& key : idle) watched_.erase(key);
  std::sort(idle.begin(), idle.end());  // deterministic order on the wire
  idle_events_since_shed_ = 0;
  watched_after_shed_ = watched_.size();
  return idle;
}

}  // namespace ddp::rdzv::proxy
