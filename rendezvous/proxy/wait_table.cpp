#include "rendezvous/proxy/wait_table.hpp"

#include <algorithm>
#include <stdexcept>

#include "rendezvous/codec.hpp"

namespace ddp::rdzv::proxy {

bool WaitTable::add(std::uint64_t id, const std::vector<std::string>& keys) {
  std::vector<std::string> unique;
  unique.reserve(keys.size());
  for (const auto& k : keys)
    if (std::find(unique.begin(), unique.end(), k) == unique.end()) unique.push_back(k);
  std::size_t fresh = 0;
  for (const auto& k : unique)
    if (!watched_.contains(k)) ++fresh;
  if (watched_.size() + fresh > max_watched_) return false;
  for (const auto& k : unique) {
    if (watched_.insert(k).second) to_watch_.push_back(k);
  }
  waits_[id] = Wait{std::move(unique), false};
  unbatched_.push_back(id);
  return true;
}

void WaitTable::cancel(std::uint64_t id) { waits_.erase(id); }

WaitTable::Batch WaitTable::take_batch() {
  Batch b;
  b.watch = std::move(to_watch_);
  to_watch_.clear();
  std::vector<std::uint64_t> covered;
  std::vector<std::string> keys;
  std::unordered_set<std::string> seen;
  for (auto id : unbatched_) {
    auto it = waits_.find(id);
    if (it == waits_.end()) continue;  // cancelled before its PROBE
    covered.push_back(id);
    for (const auto& k : it->second.missing)
      if (seen.insert(k).second) keys.push_back(k);
  }
  unbatched_.clear();
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
  std::unordered_set<std::string> present;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (exists[i]) present.insert(keys[i]);
  std::vector<std::uint64_t> done;
  for (auto id : covered) {
    auto it = waits_.find(id);
    if (it == waits_.end()) continue;
    auto& w = it->second;
    std::erase_if(w.missing, [&](const std::string& k) { return present.contains(k); });
    if (w.missing.empty()) {
      done.push_back(id);
      waits_.erase(it);
      continue;
    }
    w.armed = true;
    for (const auto& k : w.missing) armed_by_key_[k].push_back(id);
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
    if (w == waits_.end()) continue;  // answered or cancelled
    std::erase(w->second.missing, key);
    if (w->second.missing.empty()) {
      done.push_back(id);
      waits_.erase(w);
    }
  }
  return done;
}

bool WaitTable::unwatch_due() const {
  const bool many = watched_.size() * 2 > max_watched_ && watched_.size() > watched_after_shed_;
  return many || idle_events_since_shed_ > kIdleEventsBeforeShedding;
}

std::vector<std::string> WaitTable::take_unwatch() {
  std::unordered_set<std::string> needed;
  for (const auto& [id, wait] : waits_)
    for (const auto& key : wait.missing) needed.insert(key);
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

std::optional<WatchMessage> parse_watch_message(std::string_view buf,
                                                std::optional<std::size_t> expect_probe_keys,
                                                std::size_t max_bytes) {
  if (buf.empty()) return std::nullopt;
  const auto first = static_cast<std::uint8_t>(buf[0]);
  WatchMessage m;
  if (first == static_cast<std::uint8_t>(WatchEventType::CallbackRegistered)) {
    m.kind = WatchMessage::Kind::Registered;
    m.size = 1;
    return m;
  }
  if (first == kProbeReplyTag) {
    if (!expect_probe_keys) throw std::runtime_error("PROBE reply without a PROBE");
    const std::size_t n = *expect_probe_keys;
    if (buf.size() < 1 + n) return std::nullopt;
    m.kind = WatchMessage::Kind::ProbeReply;
    m.size = 1 + n;
    m.exists.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto b = static_cast<std::uint8_t>(buf[1 + i]);
      if (b > 1) throw std::runtime_error("bad byte in a PROBE reply");
      m.exists.push_back(b == 1);
    }
    return m;
  }
  if (first > static_cast<std::uint8_t>(WatchEventType::KeyDeleted))
    throw std::runtime_error("unexpected byte on the watch link");
  // Notification: u8 type | str key | bytes old | bytes new.
  std::size_t pos = 1;
  std::size_t total = 0;
  std::string_view fields[3];
  for (auto& field : fields) {
    if (buf.size() < pos + 8) return std::nullopt;
    const std::uint64_t len = get_u64(buf.data() + pos);
    total += len;
    if (len > max_bytes || total > max_bytes)
      throw std::length_error("watch notification of " + std::to_string(len) +
                              " bytes exceeds limit " + std::to_string(max_bytes));
    pos += 8;
    if (buf.size() < pos + len) return std::nullopt;
    field = buf.substr(pos, static_cast<std::size_t>(len));
    pos += static_cast<std::size_t>(len);
  }
  m.kind = WatchMessage::Kind::Event;
  m.size = pos;
  m.type = static_cast<WatchEventType>(first);
  m.key = std::string(fields[0]);
  return m;
}

}  // namespace ddp::rdzv::proxy
