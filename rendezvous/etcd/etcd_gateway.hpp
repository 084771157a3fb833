#pragma once

// The seam between the etcd round protocol (etcd_round_protocol.hpp) and etcd: the few KV, lease
// and watch calls it makes. The real gateway is the JSON-gateway client (etcd_client.hpp:
// EtcdClient, EtcdWatch, ClientCluster); the protocol's unit tests use an in-process fake that
// can refuse, stall, compact, expire leases and hold back watch events.
//
// Errors are the client's: EtcdUnavailable (no member answered in time), EtcdRefused (etcd's
// final answer, with its gRPC code), EtcdProtocolError (an answer that is not etcd's).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/etcd/etcd_codec.hpp"

namespace ddp::rdzv::etcd {

// One connection's blocking calls, used from one thread at a time.
class EtcdGateway {
 public:
  virtual ~EtcdGateway() = default;
  // `keys_only`: the keys, their revisions and leases, no values.
  virtual RangeReply range(const std::string& key, const std::string& range_end = {},
                           bool keys_only = false) = 0;
  virtual std::int64_t put(const std::string& key, const std::string& value,
                           std::int64_t lease = 0) = 0;
  virtual std::int64_t erase(const std::string& key, const std::string& range_end = {}) = 0;
  virtual TxnReply txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                       const std::vector<Op>& failure = {}) = 0;
  // The lease and the TTL etcd granted (it may grant more than asked).
  virtual LeaseGrant grant_lease(std::int64_t ttl_seconds) = 0;
  // The TTL left; 0 when the lease has expired (or was revoked).
  virtual std::int64_t keep_alive(std::int64_t lease) = 0;
  virtual void revoke_lease(std::int64_t lease) = 0;
  // Waits until something under [key, range_end) changes at or after `start_revision`, at most
  // `wait`. The events (empty: none in time; one Put with an empty key: compacted, reread).
  virtual std::vector<WatchEvent> wait_for_change(const std::string& key,
                                                  const std::string& range_end,
                                                  std::int64_t start_revision,
                                                  std::chrono::milliseconds wait) = 0;
  // Whether any member answers at all (no leader needed): "etcd is there" vs "nothing answers".
  virtual bool any_member_answers() = 0;
  // Every member that answers now belongs to one etcd cluster (the cluster id in its status);
  // throws EtcdProtocolError with one line naming two members of different clusters. Members
  // that do not answer within `within` (all asked at once) are skipped: every later reply's
  // cluster id is compared with the one settled here (a member of another cluster is that
  // member's failure).
  virtual void check_one_cluster(std::chrono::milliseconds /*within*/) {}
  // The member that answered last (where a watch should start); 0 when there is one.
  virtual std::size_t current_member() const { return 0; }
};

// A streamed watch's timing (see EtcdWatch in etcd_client.hpp).
struct WatchTiming {
  std::chrono::milliseconds give_up{std::chrono::seconds(5)};
  std::chrono::milliseconds silence{0};  // 0: a quiet stream is never taken for dead
  std::size_t first_member = 0;          // the member tried first (one that answers)
};

// A streamed watch's callbacks, called on the watch's own thread in order.
struct WatchCallbacks {
  std::function<void(const WatchMessage&)> on_message;
  // No member served the watch for its give-up time: called once, the watch ends.
  std::function<void(const std::string&)> on_error;
  // etcd compacted the revisions the watch still needed (`compacted`: the oldest kept): read the
  // state anew and return the revision to watch from (the read's revision + 1). Without it, or
  // when it throws, on_error is called.
  std::function<std::int64_t(std::int64_t compacted)> on_compacted;
};

// A running watch; destroying it stops it (no callback runs after the destructor returns).
class EtcdWatchStream {
 public:
  virtual ~EtcdWatchStream() = default;
};

// Where the protocol's connections come from: one per thread (the rendezvous thread, the
// keepalive thread, a bounded leave), each with its own per-call deadline.
class EtcdCluster {
 public:
  virtual ~EtcdCluster() = default;
  virtual std::unique_ptr<EtcdGateway> connect(std::chrono::milliseconds timeout) = 0;
  virtual std::unique_ptr<EtcdWatchStream> watch(std::string key, std::string range_end,
                                                 std::int64_t start_revision, WatchTiming timing,
                                                 WatchCallbacks callbacks) = 0;
};

}  // namespace ddp::rdzv::etcd
