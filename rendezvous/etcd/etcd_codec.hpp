#pragma once

// The pure half of ddprun's etcd v3 client: the JSON gateway's request bodies and replies
// (keys and values base64, 64-bit numbers as JSON strings), the end of a prefix range, and the
// framing of a streamed watch (one JSON object per event batch). No I/O; etcd_client.cpp sends
// what this builds. See docs/rendezvous.md, "The etcd backend".

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::rdzv::etcd {

// A reply etcd (or whatever answered) sent that is not what the gateway's API says.
class EtcdProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// etcd itself refused the request: the gateway's error body ({"error":..., "code": N}, or a
// stream's {"error":{"grpc_code": N, ...}}) with gRPC status code N (5 NotFound, 16
// Unauthenticated, ...). The client tries another member instead for the codes that mean "not
// now, here" (etcd_failure.hpp); these are etcd's final word.
class EtcdRefused : public EtcdProtocolError {
 public:
  EtcdRefused(const std::string& what, int grpc_code)
      : EtcdProtocolError(what), grpc_code_(grpc_code) {}
  int grpc_code() const { return grpc_code_; }

 private:
  int grpc_code_;
};

// The gateway's error in a reply body: the gRPC code and etcd's message.
struct GatewayError {
  int code = 0;
  std::string message;
};
// nullopt when `body` is not the gateway's error (not JSON, or JSON without a code).
std::optional<GatewayError> parse_gateway_error(std::string_view body);

std::string base64_encode(std::string_view bytes);
// nullopt for anything that is not canonical base64 (padding included).
std::optional<std::string> base64_decode(std::string_view text);

// The range_end that makes [prefix, end) every key starting with `prefix` (etcd's rule: the
// last byte below 0xff incremented, the rest dropped; "\0" when every byte is 0xff).
std::string prefix_end(std::string_view prefix);

struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;
};

struct RangeReply {
  std::int64_t revision = 0;  // the store's revision when it answered
  std::vector<KeyValue> kvs;
  bool more = false;  // a page (a request with a limit): more keys follow the last one
};

// One comparison of a txn: the key's `target` compared EQUAL to `number` (VERSION,
// CREATE = create revision, MOD = mod revision) or to `value` (VALUE).
struct Compare {
  enum class Target { Version, Create, Mod, Value };
  std::string key;
  Target target = Target::Version;
  std::int64_t number = 0;
  std::string value;
};

// One operation of a txn branch.
struct Op {
  enum class Kind { Put, Range, Delete };
  Kind kind = Kind::Put;
  std::string key;
  std::string value;       // Put
  std::int64_t lease = 0;  // Put; 0: none
  std::string range_end;   // Range, Delete; empty: the key alone
};
Op put_op(std::string key, std::string value, std::int64_t lease = 0);
Op range_op(std::string key, std::string range_end = {});
Op delete_op(std::string key, std::string range_end = {});

struct TxnReply {
  std::int64_t revision = 0;
  bool succeeded = false;
  // The replies of the branch that ran, in order; only Range ops fill `kvs`.
  std::vector<RangeReply> ranges;
};

struct WatchEvent {
  enum class Type { Put, Delete };
  Type type = Type::Put;
  KeyValue kv;
};

// One streamed watch message.
struct WatchMessage {
  bool created = false;
  bool canceled = false;
  std::int64_t revision = 0;
  // The oldest revision still kept, when the watch asked for a compacted one.
  std::int64_t compact_revision = 0;
  std::string cancel_reason;
  std::vector<WatchEvent> events;
  std::string cluster_id;  // the sending member's cluster (its header's), empty when absent
};

// --- request bodies (JSON text) -------------------------------------------------------------
// `limit` > 0: at most that many keys (a page); `revision` > 0: the store as it was then (the
// later pages of one read); `keys_only`: the keys without their values.
std::string range_request(std::string_view key, std::string_view range_end = {},
                          std::int64_t limit = 0, std::int64_t revision = 0,
                          bool keys_only = false);
std::string put_request(std::string_view key, std::string_view value, std::int64_t lease = 0);
std::string delete_request(std::string_view key, std::string_view range_end = {});
std::string txn_request(const std::vector<Compare>& compares, const std::vector<Op>& success,
                        const std::vector<Op>& failure);
std::string lease_grant_request(std::int64_t ttl_seconds);
std::string lease_id_request(std::int64_t id);  // keepalive and revoke
// Asks for progress notifications too (an empty message with the revision the watch is
// synced to, sent by etcd every --experimental-watch-progress-notify-interval).
std::string watch_request(std::string_view key, std::string_view range_end,
                          std::int64_t start_revision);
std::string authenticate_request(std::string_view user, std::string_view password);

// --- replies: throw EtcdProtocolError on a malformed one ------------------------------------
RangeReply parse_range(std::string_view body);
std::int64_t parse_revision(std::string_view body);  // put, delete: the header's revision
TxnReply parse_txn(std::string_view body);
// lease/grant: the lease's ID and the TTL etcd granted (it may grant more than asked: at least
// its election timeout's worth); the reply's `error`, when etcd refused, is thrown.
struct LeaseGrant {
  std::int64_t id = 0;
  std::int64_t ttl = 0;
};
LeaseGrant parse_lease_grant(std::string_view body);
// lease/keepalive: the TTL left (0 or less: the lease no longer exists).
std::int64_t parse_keepalive(std::string_view body);
WatchMessage parse_watch_message(std::string_view body);
// The id of the cluster the answering member belongs to (its reply's header.cluster_id, as the
// decimal text the gateway writes); empty when the reply has none.
std::string parse_cluster_id(std::string_view body);
// auth/authenticate: the token to send as the Authorization header of every later call.
std::string parse_auth_token(std::string_view body);
// The gateway's error reply ({"error":..., "code":..., "message":...}), if `body` is one.
std::optional<std::string> gateway_error(std::string_view body);

// Splits a watch stream into its JSON messages (the gateway writes one object per line; the
// splitter does not rely on that: it counts braces outside strings). Bounded: a message larger
// than `max_message` bytes is an EtcdProtocolError.
class WatchFramer {
 public:
  explicit WatchFramer(std::size_t max_message = 64u << 20) : max_(max_message) {}
  // Appends `bytes`; the complete messages so far come out of next().
  void feed(std::string_view bytes);
  std::optional<std::string> next();

 private:
  std::size_t max_;
  std::string buffer_;
  std::size_t scanned_ = 0;                // bytes of buffer_ already scanned
  std::size_t start_ = std::string::npos;  // where the current object began
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  std::vector<std::string> ready_;
  std::size_t taken_ = 0;
};

}  // namespace ddp::rdzv::etcd
