#pragma once

// The key-value store the TCPStore protocol talks to, with no I/O: keys -> bytes, ADD counters
// as decimal text, WAIT registrations, G1 watches and G2 queues. Callers identify the waiting or
// watching party with an opaque ClientId and get back, in Effects, which of them to answer.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rendezvous/protocol.hpp"

namespace ddp::rdzv {

using ClientId = std::uint64_t;

// The clients watching one key (each once: a connection's repeated WATCH_KEY is one
// registration). Shared between the model and the events in flight, never copied per change: the
// model copies it only when it changes while an event still holds it.
using WatcherList = std::shared_ptr<const std::vector<ClientId>>;

// One change of a watched key, for every client watching it. The values are held once however
// many watchers there are.
struct WatchEvent {
  WatcherList watchers;
  WatchEventType type = WatchEventType::KeyUpdated;
  std::string key;
  std::string old_value;
  std::string new_value;
};

// What a mutation asks the caller to deliver: STOP_WAITING to each woken client (in order) and
// notifications to G1 watchers.
struct Effects {
  std::vector<ClientId> woken;
  std::vector<WatchEvent> events;
};

// COMPARE_SET and waiters: the 1.13 server never wakes, libuv always wakes (even when the key
// stays absent). IfPresent (the default we serve) wakes exactly when a waiter's key now exists.
enum class CompareSetWake { Never, IfPresent };

// Parses stored counter text the way the reference servers do (std::stoll: leading blanks,
// optional sign, digits up to the first non-digit). nullopt when there are no digits or the
// value overflows int64.
std::optional<std::int64_t> parse_counter(std::string_view text);

class StoreModel {
 public:
  // Bookkeeping cost charged per entry (key, queue item, WAIT or watch registration) on top of
  // its bytes, so that many tiny entries are bounded too.
  static constexpr std::size_t kEntryOverheadBytes = 64;

  void set(const std::string& key, std::string value, Effects& fx);
  const std::string* get(const std::string& key) const;  // nullptr when absent
  // nullopt: the existing value is not a number (the reference closes that connection).
  std::optional<std::int64_t> add(const std::string& key, std::int64_t delta, Effects& fx);
  // Returns the reply value (four cases of the protocol notes, section 3.2).
  std::string compare_set(const std::string& key, const std::string& expected, std::string desired,
                          CompareSetWake wake, Effects& fx);
  void append(const std::string& key, std::string_view data, Effects& fx);
  bool delete_key(const std::string& key, Effects& fx);
  std::int64_t num_keys() const { return static_cast<std::int64_t>(kv_.size()); }
  std::vector<std::string> list_keys() const;
  // Bytes of LIST_KEYS' reply after its count: 8 + size per key.
  std::size_t list_keys_bytes() const;

  // A key counts as present if it is in the map or names a non-empty queue (libuv rule).
  bool check(const std::vector<std::string>& keys) const;

  // true: every key is present, answer now. false: `client` is registered on each missing key
  // (duplicates count twice) and will appear in Effects::woken when the last one arrives.
  // A client has at most one pending wait; a new one replaces the old registration.
  bool wait(ClientId client, const std::vector<std::string>& keys);
  // Drops the client's pending wait; true if one was pending.
  bool cancel_wait(ClientId client);
  bool has_pending_wait(ClientId client) const { return pending_.contains(client); }

  // BARRIER: counter(key) += 1; true when it reached world_size (all waiters on key are woken
  // through fx), false when `client` now waits on key. nullopt: counter text is not a number.
  std::optional<bool> barrier(ClientId client, const std::string& key, std::int64_t world_size,
                              Effects& fx);

  // Registers `client` on `key`; false (nothing changes) when it is registered already.
  bool watch(ClientId client, const std::string& key);
  bool watching(ClientId client, const std::string& key) const;
  // Keys `client` watches, and registrations of every client together (the bounds of
  // StoreLimits::max_watches_per_connection and max_watches).
  std::size_t watch_count(ClientId client) const;
  std::size_t watch_total() const { return watch_total_; }
  // Drops one registration of `client` on `key` (ddprun's UNWATCH); false when it had none.
  bool unwatch(ClientId client, const std::string& key);

  void queue_push(const std::string& queue, std::string item, Effects& fx);
  // Pops the head; `length_before` is the queue length before the pop (0 = nothing popped).
  std::optional<std::string> queue_pop(const std::string& queue, std::int64_t& length_before);
  std::int64_t queue_len(const std::string& queue) const;

  // Forget every registration of a client that went away.
  void remove_client(ClientId client);

  // Bytes held (see kEntryOverheadBytes) and keys (map keys and queues), the two figures the
  // server's --max-store-bytes and --max-keys bound.
  std::size_t held_bytes() const { return held_bytes_; }
  std::size_t key_count() const { return kv_.size() + queues_.size(); }
  static std::size_t entry_bytes(std::size_t key_bytes, std::size_t value_bytes) {
    return key_bytes + value_bytes + kEntryOverheadBytes;
  }

  // Introspection for tests and metrics.
  std::size_t pending_wait_count() const { return pending_.size(); }
  std::size_t waiter_registration_count() const;
  std::size_t watch_registration_count() const;

 private:
  struct PendingWait {
    std::size_t remaining = 0;
    std::vector<std::string> keys;  // distinct keys it is registered on
  };

  bool present(const std::string& key) const;
  // Replace a map value, keeping held_bytes_ true; returns the old value.
  std::string replace_value(std::string& slot, std::string value);
  // Insert or find `key` in the map; a new key is charged its entry bytes.
  std::pair<std::unordered_map<std::string, std::string>::iterator, bool> find_or_create(
      const std::string& key);
  void register_pending(ClientId client, PendingWait pending);
  void drop_pending(std::unordered_map<ClientId, PendingWait>::iterator p);
  void wake_all(const std::string& key, Effects& fx);
  void wake_one(const std::string& key, Effects& fx);
  /// Counts `count` of `client`'s pending wait as satisfied; true when that completes the wait.
  bool release(ClientId client, std::size_t count, Effects& fx);
  void notify(const std::string& key, WatchEventType type, std::string_view old_value,
              std::string_view new_value, Effects& fx) const;
  void store_counter(const std::string& key, std::int64_t value, bool existed, Effects& fx);

  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  // key -> (client -> number of registrations of that client on the key)
  std::unordered_map<std::string, std::unordered_map<ClientId, std::size_t>> waiters_;
  std::unordered_map<ClientId, PendingWait> pending_;
  // The list of `key`'s watchers, copied first if an event still shares it.
  std::vector<ClientId>& own_watchers(const std::string& key);
  void drop_watcher(const std::string& key, ClientId client);

  // key -> watching clients, each once
  std::unordered_map<std::string, std::shared_ptr<std::vector<ClientId>>> watchers_;
  // Reverse index for cleanup and UNWATCH: client -> keys it watches (a proxy may hold tens of
  // thousands and unwatch them one by one).
  std::unordered_map<ClientId, std::unordered_set<std::string>> watched_keys_;
  std::size_t watch_total_ = 0;
  std::size_t held_bytes_ = 0;
};

}  // namespace ddp::rdzv
