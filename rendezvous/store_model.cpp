#include "rendezvous/store_model.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace ddp::rdzv {

std::optional<std::int64_t> parse_counter(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    negative = text[i] == '-';
    ++i;
  }
  const std::size_t first_digit = i;
  // Accumulate as a negative number so INT64_MIN parses without overflow.
  std::int64_t value = 0;
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const int digit = text[i] - '0';
    if (value < (kMin + digit) / 10) return std::nullopt;
    value = value * 10 - digit;
  }
  if (i == first_digit) return std::nullopt;
  if (negative) return value;
  if (value == kMin) return std::nullopt;
  return -value;
}

namespace {

// Wrapping two's-complement sum: overflow is undefined in the reference, wrapping is at least
// deterministic.
std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

}  // namespace

bool StoreModel::present(const std::string& key) const {
  if (kv_.contains(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

void StoreModel::notify(const std::string& key, WatchEventType type, std::string_view old_value,
                        std::string_view new_value, Effects& fx) const {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  fx.events.push_back(
      WatchEvent{it->second, type, key, std::string(old_value), std::string(new_value)});
}

// Hot (every SET and ADD): inline, the bookkeeping is two additions.
inline std::string StoreModel::replace_value(std::string& slot, std::string value) {
  held_bytes_ = held_bytes_ - slot.size() + value.size();
  std::string old = std::move(slot);
  slot = std::move(value);
  return old;
}

inline std::pair<std::unordered_map<std::string, std::string>::iterator, bool>
StoreModel::find_or_create(const std::string& key) {
  auto result = kv_.try_emplace(key);
  if (result.second) held_bytes_ += entry_bytes(key.size(), 0);
  return result;
}

void StoreModel::register_pending(ClientId client, PendingWait pending) {
  for (const auto& key : pending.keys) held_bytes_ += entry_bytes(key.size(), 0);
  pending_.insert_or_assign(client, std::move(pending));
}

void StoreModel::drop_pending(std::unordered_map<ClientId, PendingWait>::iterator p) {
  for (const auto& key : p->second.keys) held_bytes_ -= entry_bytes(key.size(), 0);
  pending_.erase(p);
}

bool StoreModel::release(ClientId client, std::size_t count, Effects& fx) {
  auto p = pending_.find(client);
  if (p == pending_.end()) return false;
  p->second.remaining -= std::min(count, p->second.remaining);
  if (p->second.remaining != 0) return false;
  drop_pending(p);
  fx.woken.push_back(client);
  return true;
}

void StoreModel::wake_all(const std::string& key, Effects& fx) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto registrations = std::move(it->second);
  waiters_.erase(it);
  for (const auto& [client, count] : registrations) release(client, count, fx);
}

void StoreModel::wake_one(const std::string& key, Effects& fx) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& registrations = it->second;
  // libuv semantics: consume registrations until one client's wait is complete.
  while (!registrations.empty()) {
    auto reg = registrations.begin();
    const ClientId client = reg->first;
    const std::size_t count = reg->second;
    registrations.erase(reg);
    if (release(client, count, fx)) break;
  }
  if (registrations.empty()) waiters_.erase(it);
}

void StoreModel::set(const std::string& key, std::string value, Effects& fx) {
  auto [it, created] = find_or_create(key);
  std::string old = replace_value(it->second, std::move(value));
  wake_all(key, fx);
  notify(key, created ? WatchEventType::KeyCreated : WatchEventType::KeyUpdated, old, it->second,
         fx);
}

const std::string* StoreModel::get(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

void StoreModel::store_counter(const std::string& key, std::int64_t value, bool existed,
                               Effects& fx) {
  std::string& slot = find_or_create(key).first->second;
  std::string old = replace_value(slot, std::to_string(value));
  wake_all(key, fx);
  notify(key, existed ? WatchEventType::KeyUpdated : WatchEventType::KeyCreated, old, slot, fx);
}

std::optional<std::int64_t> StoreModel::add(const std::string& key, std::int64_t delta,
                                            Effects& fx) {
  auto it = kv_.find(key);
  std::int64_t current = 0;
  if (it != kv_.end()) {
    auto parsed = parse_counter(it->second);
    if (!parsed) return std::nullopt;
    current = *parsed;
  }
  const std::int64_t result = wrapping_add(current, delta);
  store_counter(key, result, it != kv_.end(), fx);
  return result;
}

std::string StoreModel::compare_set(const std::string& key, const std::string& expected,
                                    std::string desired, CompareSetWake wake, Effects& fx) {
  auto it = kv_.find(key);
  std::string reply;
  if (it == kv_.end()) {
    if (!expected.empty()) return expected;  // the reference replies `expected` and changes nothing
    it = find_or_create(key).first;
    replace_value(it->second, std::move(desired));
    reply = it->second;
    notify(key, WatchEventType::KeyCreated, "", it->second, fx);
  } else if (it->second == expected) {
    replace_value(it->second, std::move(desired));
    reply = it->second;
    notify(key, WatchEventType::KeyUpdated, expected, it->second, fx);
  } else {
    reply = it->second;
  }
  if (wake == CompareSetWake::IfPresent) wake_all(key, fx);
  return reply;
}

void StoreModel::append(const std::string& key, std::string_view data, Effects& fx) {
  auto [it, created] = find_or_create(key);
  std::string old = created ? std::string() : it->second;
  it->second.append(data);
  held_bytes_ += data.size();
  wake_all(key, fx);
  notify(key, created ? WatchEventType::KeyCreated : WatchEventType::KeyUpdated, old, it->second,
         fx);
}

bool StoreModel::delete_key(const std::string& key, Effects& fx) {
  auto it = kv_.find(key);
  if (it == kv_.end()) return false;
  notify(key, WatchEventType::KeyDeleted, it->second, "", fx);
  held_bytes_ -= entry_bytes(key.size(), it->second.size());
  kv_.erase(it);
  return true;
}

std::vector<std::string> StoreModel::list_keys() const {
  std::vector<std::string> keys;
  keys.reserve(kv_.size());
  for (const auto& [key, value] : kv_) keys.push_back(key);
  return keys;
}

std::size_t StoreModel::list_keys_bytes() const {
  std::size_t bytes = 0;
  for (const auto& [key, value] : kv_) bytes += 8 + key.size();
  return bytes;
}

bool StoreModel::check(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return present(k); });
}

bool StoreModel::wait(ClientId client, const std::vector<std::string>& keys) {
  cancel_wait(client);
  PendingWait pending;
  for (const auto& key : keys) {
    if (present(key)) continue;
    auto& count = waiters_[key][client];
    if (count == 0) pending.keys.push_back(key);
    ++count;
    ++pending.remaining;
  }
  if (pending.remaining == 0) return true;
  register_pending(client, std::move(pending));
  return false;
}

bool StoreModel::cancel_wait(ClientId client) {
  auto p = pending_.find(client);
  if (p == pending_.end()) return false;
  for (const auto& key : p->second.keys) {
    auto w = waiters_.find(key);
    if (w == waiters_.end()) continue;
    w->second.erase(client);
    if (w->second.empty()) waiters_.erase(w);
  }
  drop_pending(p);
  return true;
}

std::optional<bool> StoreModel::barrier(ClientId client, const std::string& key,
                                        std::int64_t world_size, Effects& fx) {
  auto it = kv_.find(key);
  std::int64_t current = 0;
  if (it != kv_.end()) {
    auto parsed = parse_counter(it->second);
    if (!parsed) return std::nullopt;
    current = *parsed;
  }
  const std::int64_t arrived = wrapping_add(current, 1);
  const bool existed = it != kv_.end();
  if (arrived >= world_size) {
    store_counter(key, arrived, existed, fx);  // wakes everyone registered on the key
    return true;
  }
  // Not complete: update the counter without waking earlier arrivals, then wait on the key.
  std::string& slot = find_or_create(key).first->second;
  std::string old = replace_value(slot, std::to_string(arrived));
  notify(key, existed ? WatchEventType::KeyUpdated : WatchEventType::KeyCreated, old, slot, fx);
  cancel_wait(client);
  waiters_[key][client] += 1;
  register_pending(client, PendingWait{1, {key}});
  return false;
}

std::vector<ClientId>& StoreModel::own_watchers(const std::string& key) {
  auto& list = watchers_[key];
  if (!list) {
    list = std::make_shared<std::vector<ClientId>>();
  } else if (list.use_count() > 1) {
    list = std::make_shared<std::vector<ClientId>>(*list);  // an event still holds the old one
  }
  return *list;
}

void StoreModel::drop_watcher(const std::string& key, ClientId client) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  auto& list = own_watchers(key);
  // The latest registration first: a key watched by every node is unwatched in about constant
  // time by whoever registered last.
  auto pos = std::find(list.rbegin(), list.rend(), client);
  if (pos != list.rend()) list.erase(std::next(pos).base());
  if (list.empty()) watchers_.erase(key);
  held_bytes_ -= entry_bytes(key.size(), 0);
  --watch_total_;
}

bool StoreModel::watch(ClientId client, const std::string& key) {
  if (!watched_keys_[client].insert(key).second) return false;
  own_watchers(key).push_back(client);
  held_bytes_ += entry_bytes(key.size(), 0);
  ++watch_total_;
  return true;
}

bool StoreModel::watching(ClientId client, const std::string& key) const {
  auto w = watched_keys_.find(client);
  return w != watched_keys_.end() && w->second.contains(key);
}

std::size_t StoreModel::watch_count(ClientId client) const {
  auto w = watched_keys_.find(client);
  return w == watched_keys_.end() ? 0 : w->second.size();
}

bool StoreModel::unwatch(ClientId client, const std::string& key) {
  auto w = watched_keys_.find(client);
  if (w == watched_keys_.end() || w->second.erase(key) == 0) return false;
  if (w->second.empty()) watched_keys_.erase(w);
  drop_watcher(key, client);
  return true;
}

void StoreModel::queue_push(const std::string& queue, std::string item, Effects& fx) {
  auto [q, created] = queues_.try_emplace(queue);
  if (created) held_bytes_ += entry_bytes(queue.size(), 0);
  held_bytes_ += entry_bytes(0, item.size());
  q->second.push_back(std::move(item));
  wake_one(queue, fx);
  // A queue counts as present for WAIT and PROBE: its watchers (a proxy's WAITs) learn it too.
  notify(queue, q->second.size() == 1 ? WatchEventType::KeyCreated : WatchEventType::KeyUpdated, {},
         {}, fx);
}

std::optional<std::string> StoreModel::queue_pop(const std::string& queue,
                                                 std::int64_t& length_before) {
  auto it = queues_.find(queue);
  if (it == queues_.end() || it->second.empty()) {
    length_before = 0;
    return std::nullopt;
  }
  length_before = static_cast<std::int64_t>(it->second.size());
  std::string item = std::move(it->second.front());
  it->second.pop_front();
  held_bytes_ -= entry_bytes(0, item.size());
  if (it->second.empty()) {
    held_bytes_ -= entry_bytes(queue.size(), 0);
    queues_.erase(it);
  }
  return item;
}

std::int64_t StoreModel::queue_len(const std::string& queue) const {
  auto it = queues_.find(queue);
  return it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

void StoreModel::remove_client(ClientId client) {
  cancel_wait(client);
  auto w = watched_keys_.find(client);
  if (w == watched_keys_.end()) return;
  for (const auto& key : w->second) drop_watcher(key, client);
  watched_keys_.erase(w);
}

std::size_t StoreModel::waiter_registration_count() const {
  std::size_t n = 0;
  for (const auto& [key, regs] : waiters_) n += regs.size();
  return n;
}

std::size_t StoreModel::watch_registration_count() const {
  std::size_t n = 0;
  for (const auto& [key, list] : watchers_) n += list->size();
  return n;
}

}  // namespace ddp::rdzv
