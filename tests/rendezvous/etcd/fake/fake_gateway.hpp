#pragma once

// An in-process fake etcd behind the protocol's gateway seam (rendezvous/etcd/etcd_gateway.hpp),
// for EtcdRoundProtocol's unit tests: one key space with revisions and history, leases, txns with
// compares, waits, and watches the test pumps by hand, all on a fake clock. It misbehaves on
// demand: every call passes a fault hook that may throw what the real client throws
// (EtcdUnavailable, EtcdRefused), the history can be compacted, a lease expired or the watches
// silenced or ended. Single-threaded: the protocol's calls, the pumps and the test share one
// thread (the protocol runs with heartbeat_thread off; the test calls beat()).
//
// Time moves only when the protocol waits (wait_for_change with nothing to report advances the
// clock by the wait) or the test advances it; leases never expire by themselves (expire_lease).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/etcd/etcd_gateway.hpp"

namespace ddp::rdzv::etcd::fake {

class FakeCluster final : public EtcdCluster {
 public:
  using Clock = std::chrono::steady_clock;

  FakeCluster();
  ~FakeCluster() override;

  // --- the seam ---
  std::unique_ptr<EtcdGateway> connect(std::chrono::milliseconds timeout) override;
  std::unique_ptr<EtcdWatchStream> watch(std::string key, std::string range_end,
                                         std::int64_t start_revision, WatchTiming timing,
                                         WatchCallbacks callbacks) override;

  // --- the fake clock ---
  Clock::time_point now() const { return now_; }
  void advance(Clock::duration by) { now_ += by; }

  // --- misbehaviour ---
  // Called with the call's name ("range", "put", "txn", "grant", "keepalive", "revoke", "erase",
  // "wait") before each gateway call; it may throw. Empty: none.
  std::function<void(std::string_view call)> fault;
  // Called once per wait_for_change that found nothing (before the clock moves): the test's
  // script of what the other nodes and strangers do meanwhile.
  std::function<void()> on_wait;
  // Whether any_member_answers() says yes (false: nothing answers at all).
  bool members_answer = true;
  // The TTL every later lease grant gets (0: the one asked).
  std::int64_t granted_ttl = 0;
  // Non-empty: check_one_cluster() throws this line (members of two clusters listed).
  std::string clusters_differ;
  // Silenced watches get nothing from pump_watches (a member whose stream went quiet).
  bool watches_silent = false;
  // Drops the history up to the current revision: a watch or wait from before it is compacted.
  void compact();
  // The lease ends now, its keys deleted (as etcd does at its TTL).
  void expire_lease(std::int64_t id);
  // Ends every watch with on_error(why) (no member served it for its give-up).
  void fail_watches(const std::string& why);
  // Delivers every event the open watches have not seen yet (a compacted watch asks its owner
  // to re-read first). Returns how many messages were delivered.
  int pump_watches();
  int open_watches() const { return static_cast<int>(watches_.size()); }

  // --- direct access (other nodes, strangers, checks) ---
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  void erase(const std::string& key, const std::string& range_end = {});
  std::int64_t grant(std::int64_t ttl);
  bool has_lease(std::int64_t id) const { return leases_.count(id) > 0; }
  std::optional<KeyValue> get(const std::string& key) const;
  std::vector<KeyValue> prefix(const std::string& prefix) const;
  std::int64_t revision() const { return revision_; }
  int calls(std::string_view name) const;

 private:
  /// Deletes every key `match` picks, one revision for all, each deletion in the history.
  void erase_where(const std::function<bool(const std::string&, const KeyValue&)>& match);
  friend class FakeGateway;
  friend class FakeWatch;
  struct Event {
    std::int64_t revision = 0;
    WatchEvent event;
  };
  struct Watcher {
    std::string key, end;
    std::int64_t next = 0;
    WatchCallbacks callbacks;
    bool ended = false;
  };
  void call(std::string_view name);
  RangeReply range(const std::string& key, const std::string& end, bool keys_only) const;
  std::vector<WatchEvent> events_since(const std::string& key, const std::string& end,
                                       std::int64_t from) const;
  bool compare(const Compare& c) const;

  Clock::time_point now_;
  std::map<std::string, KeyValue> kvs_;
  std::vector<Event> history_;
  std::int64_t revision_ = 1;
  std::int64_t compacted_ = 0;
  std::int64_t next_lease_ = 0x1000;
  std::map<std::int64_t, std::int64_t> leases_;  // id -> ttl
  std::map<std::string, int, std::less<>> calls_;
  std::set<Watcher*> watches_;
};

}  // namespace ddp::rdzv::etcd::fake
