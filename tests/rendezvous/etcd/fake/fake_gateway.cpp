#include "fake_gateway.hpp"

#include "key_range.hpp"

#include <fmt/format.h>

#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_failure.hpp"

namespace ddp::rdzv::etcd::fake {

class FakeGateway final : public EtcdGateway {
 public:
  explicit FakeGateway(FakeCluster& etcd) : etcd_(etcd) {}
  RangeReply range(const std::string& key, const std::string& range_end, bool keys_only) override {
    etcd_.call("range");
    return etcd_.range(key, range_end, keys_only);
  }
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease) override {
    etcd_.call("put");
    if (lease != 0 && !etcd_.has_lease(lease))
      throw EtcdRefused("etcdserver: requested lease not found", kGrpcNotFound);
    return etcd_.put(key, value, lease);
  }
  std::int64_t erase(const std::string& key, const std::string& range_end) override {
    etcd_.call("erase");
    etcd_.erase(key, range_end);
    return etcd_.revision();
  }
  TxnReply txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
               const std::vector<Op>& failure) override {
    etcd_.call("txn");
    TxnReply reply;
    reply.succeeded = true;
    for (const auto& c : compares) reply.succeeded = reply.succeeded && etcd_.compare(c);
    const auto& ops = reply.succeeded ? success : failure;
    for (const auto& op : ops) {
      if (op.kind == Op::Kind::Put && op.lease != 0 && !etcd_.has_lease(op.lease))
        throw EtcdRefused("etcdserver: requested lease not found", kGrpcNotFound);
    }
    for (const auto& op : ops) {
      switch (op.kind) {
        case Op::Kind::Put:
          etcd_.put(op.key, op.value, op.lease);
          break;
        case Op::Kind::Delete:
          etcd_.erase(op.key, op.range_end);
          break;
        case Op::Kind::Range:
          reply.ranges.push_back(etcd_.range(op.key, op.range_end, false));
          break;
      }
    }
    reply.revision = etcd_.revision();
    return reply;
  }
  LeaseGrant grant_lease(std::int64_t ttl_seconds) override {
    etcd_.call("grant");
    const std::int64_t ttl = etcd_.granted_ttl > 0 ? etcd_.granted_ttl : ttl_seconds;
    return LeaseGrant{etcd_.grant(ttl), ttl};
  }
  std::int64_t keep_alive(std::int64_t lease) override {
    etcd_.call("keepalive");
    auto it = etcd_.leases_.find(lease);
    return it == etcd_.leases_.end() ? 0 : it->second;
  }
  void revoke_lease(std::int64_t lease) override {
    etcd_.call("revoke");
    etcd_.expire_lease(lease);
  }
  std::vector<WatchEvent> wait_for_change(const std::string& key, const std::string& range_end,
                                          std::int64_t start_revision,
                                          std::chrono::milliseconds wait) override {
    etcd_.call("wait");
    auto events = etcd_.events_since(key, range_end, start_revision);
    if (events.empty() && etcd_.on_wait) {
      etcd_.on_wait();
      events = etcd_.events_since(key, range_end, start_revision);
    }
    if (events.empty()) etcd_.advance(wait);
    return events;
  }
  bool any_member_answers() override { return etcd_.members_answer; }
  void check_one_cluster(std::chrono::milliseconds) override {
    etcd_.call("check_cluster");
    if (!etcd_.clusters_differ.empty()) throw EtcdProtocolError(etcd_.clusters_differ);
  }

 private:
  FakeCluster& etcd_;
};

class FakeWatch final : public EtcdWatchStream {
 public:
  FakeWatch(FakeCluster& etcd, FakeCluster::Watcher watcher)
      : etcd_(etcd), watcher_(std::move(watcher)) {
    etcd_.watches_.insert(&watcher_);
  }
  ~FakeWatch() override { etcd_.watches_.erase(&watcher_); }

 private:
  FakeCluster& etcd_;
  FakeCluster::Watcher watcher_;
};

FakeCluster::FakeCluster() : now_(Clock::time_point() + std::chrono::hours(1)) {}
FakeCluster::~FakeCluster() = default;

std::unique_ptr<EtcdGateway> FakeCluster::connect(std::chrono::milliseconds) {
  return std::make_unique<FakeGateway>(*this);
}

std::unique_ptr<EtcdWatchStream> FakeCluster::watch(std::string key, std::string range_end,
                                                    std::int64_t start_revision, WatchTiming,
                                                    WatchCallbacks callbacks) {
  return std::make_unique<FakeWatch>(
      *this, Watcher{std::move(key), std::move(range_end), start_revision, std::move(callbacks)});
}

void FakeCluster::call(std::string_view name) {
  ++calls_[std::string(name)];
  if (fault) fault(name);
}

int FakeCluster::calls(std::string_view name) const {
  auto it = calls_.find(name);
  return it == calls_.end() ? 0 : it->second;
}

std::int64_t FakeCluster::put(const std::string& key, const std::string& value,
                              std::int64_t lease) {
  ++revision_;
  KeyValue& kv = kvs_[key];
  kv.key = key;
  if (kv.create_revision == 0) kv.create_revision = revision_;
  kv.mod_revision = revision_;
  ++kv.version;
  kv.value = value;
  kv.lease = lease;
  history_.push_back(Event{revision_, WatchEvent{WatchEvent::Type::Put, kv}});
  return revision_;
}

void FakeCluster::erase_where(
    const std::function<bool(const std::string&, const KeyValue&)>& match) {
  bool any = false;
  for (auto it = kvs_.begin(); it != kvs_.end();) {
    if (!match(it->first, it->second)) {
      ++it;
      continue;
    }
    if (!any) ++revision_;
    any = true;
    KeyValue gone;
    gone.key = it->first;
    gone.mod_revision = revision_;
    history_.push_back(Event{revision_, WatchEvent{WatchEvent::Type::Delete, gone}});
    it = kvs_.erase(it);
  }
}

void FakeCluster::erase(const std::string& key, const std::string& range_end) {
  erase_where([&](const std::string& k, const KeyValue&) { return in_range(k, key, range_end); });
}

std::int64_t FakeCluster::grant(std::int64_t ttl) {
  const std::int64_t id = next_lease_++;
  leases_[id] = ttl;
  return id;
}

void FakeCluster::expire_lease(std::int64_t id) {
  leases_.erase(id);
  erase_where([&](const std::string&, const KeyValue& kv) { return kv.lease == id; });
}

void FakeCluster::compact() {
  compacted_ = revision_;
  std::erase_if(history_, [this](const Event& e) { return e.revision <= compacted_; });
}

void FakeCluster::fail_watches(const std::string& why) {
  for (auto* w : watches_) {
    if (w->ended) continue;
    w->ended = true;
    if (w->callbacks.on_error) w->callbacks.on_error(why);
  }
}

int FakeCluster::pump_watches() {
  if (watches_silent) return 0;
  int delivered = 0;
  const std::set<Watcher*> watches = watches_;
  for (auto* w : watches) {
    if (w->ended || !watches_.count(w)) continue;
    if (w->next <= compacted_) {
      // As etcd: the watch is cancelled with the compact revision; the owner re-reads.
      if (!w->callbacks.on_compacted) {
        w->ended = true;
        if (w->callbacks.on_error) w->callbacks.on_error("compacted");
        continue;
      }
      w->next = w->callbacks.on_compacted(compacted_ + 1);
      if (!watches_.count(w)) continue;
    }
    WatchMessage message;
    for (const auto& e : history_) {
      if (e.revision >= w->next && in_range(e.event.kv.key, w->key, w->end))
        message.events.push_back(e.event);
    }
    w->next = revision_ + 1;
    message.revision = revision_;
    if (message.events.empty()) continue;
    ++delivered;
    w->callbacks.on_message(message);
  }
  return delivered;
}

RangeReply FakeCluster::range(const std::string& key, const std::string& end,
                              bool keys_only) const {
  RangeReply reply;
  reply.revision = revision_;
  for (const auto& [k, kv] : kvs_) {
    if (!in_range(k, key, end)) continue;
    reply.kvs.push_back(kv);
    if (keys_only) reply.kvs.back().value.clear();
  }
  return reply;
}

std::vector<WatchEvent> FakeCluster::events_since(const std::string& key, const std::string& end,
                                                  std::int64_t from) const {
  std::vector<WatchEvent> events;
  if (from <= compacted_) {
    // As the client: a compacted revision is one Put with an empty key (the caller rereads).
    events.push_back(WatchEvent{});
    return events;
  }
  for (const auto& e : history_) {
    if (e.revision >= from && in_range(e.event.kv.key, key, end)) events.push_back(e.event);
  }
  return events;
}

std::optional<KeyValue> FakeCluster::get(const std::string& key) const {
  auto it = kvs_.find(key);
  if (it == kvs_.end()) return std::nullopt;
  return it->second;
}

std::vector<KeyValue> FakeCluster::prefix(const std::string& p) const {
  return range(p, prefix_end(p), false).kvs;
}

bool FakeCluster::compare(const Compare& c) const {
  auto it = kvs_.find(c.key);
  const KeyValue none;
  const KeyValue& kv = it == kvs_.end() ? none : it->second;
  switch (c.target) {
    case Compare::Target::Version:
      return kv.version == c.number;
    case Compare::Target::Create:
      return kv.create_revision == c.number;
    case Compare::Target::Mod:
      return kv.mod_revision == c.number;
    case Compare::Target::Value:
      return it != kvs_.end() && kv.value == c.value;
  }
  return false;
}

}  // namespace ddp::rdzv::etcd::fake
