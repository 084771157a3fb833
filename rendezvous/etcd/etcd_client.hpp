#pragma once

// A small etcd v3 client over the JSON gateway (HTTP/1.1 keep-alive, Boost.Beast): range, put,
// delete, txn, leases and watches. Blocking calls with a deadline each (run on the caller's
// thread on a private io_context), failing over across the listed members; a streamed watch
// runs on a thread of its own (EtcdWatch). The codec (etcd_codec.hpp) is the pure half.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rendezvous/etcd/etcd_codec.hpp"
#include "rendezvous/etcd/etcd_gateway.hpp"

namespace boost::asio::ssl {
class context;
}

namespace ddp::rdzv::etcd {

class MemberStream;  // one connection to a member (etcd_client.cpp)

struct Endpoint {
  std::string host;  // an IPv6 address without its brackets
  std::uint16_t port = 2379;
  bool https = false;  // written as https://
  // "host:port", "[::1]:port" for an IPv6 address.
  std::string name() const;
};

// "[http://|https://]host:port[,...]" (a missing port is etcd's 2379; an IPv6 address in
// brackets, "[::1]:2379"); throws std::invalid_argument, also for a list that mixes http:// and
// https://, or one of more than kMaxEndpoints members.
std::vector<Endpoint> parse_endpoints(std::string_view text);
// An etcd cluster has a handful of members (etcd advises 3, 5 or 7); the first join asks every
// listed member at once, so the list is bounded (1,000 addresses were a typo, not a cluster).
inline constexpr std::size_t kMaxEndpoints = 64;
std::string describe(const std::vector<Endpoint>& endpoints);  // "h1:p1,h2:p2"

// No member of the cluster answered within the call's deadline (or quorum is lost: members
// answer, but cannot commit). `etcd_answered`: some member is etcd and answered, only not with
// a result (no leader, timed out, too busy): etcd is alive, if without a leader.
class EtcdUnavailable : public std::runtime_error {
 public:
  explicit EtcdUnavailable(const std::string& what, bool etcd_answered = false)
      : std::runtime_error(what), etcd_answered_(etcd_answered) {}
  bool etcd_answered() const { return etcd_answered_; }

 private:
  bool etcd_answered_;
};

// The bounds on what one member may send: a reply's body (a larger one is an EtcdProtocolError
// naming the member, not "did not answer"), and the keys read per page of a range. etcd keeps a
// value to --max-request-bytes (1.5 MiB by default), base64 makes it 2 MiB: a page of 32 such
// values fits the reply's bound. A range stops with an error past kMaxRangeKeys keys.
inline constexpr std::size_t kMaxReplyBytes = 64u << 20;
inline constexpr std::int64_t kRangePageKeys = 32;
inline constexpr std::size_t kMaxRangeKeys = 100000;

// What the clients of one cluster share (the rendezvous thread's, the keepalive's, the watch's):
// the member to try first (the one that answered last) and the etcd cluster the job settled on
// (the cluster id of the first member that answered). A reply from a member of another cluster
// is that member's failure, whenever it comes: a failover must never move the job to another
// cluster's keys and leases.
class MemberBook {
 public:
  std::size_t preferred() const {
    std::lock_guard lock(m_);
    return preferred_;
  }
  void prefer(std::size_t member) {
    std::lock_guard lock(m_);
    preferred_ = member;
  }
  // The settled cluster id and the member that first answered with it: `id` from `member`
  // when none was settled yet.
  std::pair<std::string, std::string> settle(const std::string& id, const std::string& member) {
    std::lock_guard lock(m_);
    if (cluster_id_.empty() && !id.empty()) {
      cluster_id_ = id;
      settled_by_ = member;
    }
    return {cluster_id_, settled_by_};
  }

 private:
  mutable std::mutex m_;
  std::size_t preferred_ = 0;
  std::string cluster_id_;
  std::string settled_by_;
};

struct ClientOptions {
  std::vector<Endpoint> endpoints;
  // Shared by every client and watch made from these options (null: each client its own).
  std::shared_ptr<MemberBook> book;
  // Every call (across every member it tries) ends within this long.
  std::chrono::milliseconds timeout{std::chrono::seconds(5)};
  // etcd's own authentication (auth enabled on the cluster): every call carries the token that
  // /v3/auth/authenticate gave for this user; empty: none.
  std::string user;
  std::string password;
  // TLS to every member (an https:// member, or any of the files given): each member's
  // certificate is verified against `ca_file` (empty: the system's CAs) and its host name or
  // address; `cert_file` and `key_file` are this client's (etcd's --client-cert-auth).
  struct Tls {
    bool on = false;
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
  } tls;
};

// What is wrong with the TLS files (unreadable, not PEM, a key that does not match the
// certificate), as one line; nullopt when they load.
std::optional<std::string> tls_setup_error(const ClientOptions::Tls& tls);

class EtcdClient final : public EtcdGateway {
 public:
  explicit EtcdClient(ClientOptions options);
  ~EtcdClient() override;
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Read in pages of kRangePageKeys keys, every page at the first one's revision (one
  // snapshot; a compaction between pages restarts the read).
  // `keys_only`: the keys, their revisions and leases, no values (a check of which keys exist
  // does not read a stranger's huge values beside them).
  RangeReply range(const std::string& key, const std::string& range_end = {},
                   bool keys_only = false) override;
  std::int64_t put(const std::string& key, const std::string& value,
                   std::int64_t lease = 0) override;
  std::int64_t erase(const std::string& key, const std::string& range_end = {}) override;
  TxnReply txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
               const std::vector<Op>& failure = {}) override;
  // The lease and the TTL etcd granted (at least the asked one; more when etcd's election
  // timeout asks for it).
  LeaseGrant grant_lease(std::int64_t ttl_seconds) override;
  // The TTL left; 0 when the lease has expired (or was revoked).
  std::int64_t keep_alive(std::int64_t lease) override;
  void revoke_lease(std::int64_t lease) override;
  // Waits until something under [key, range_end) changes at or after `start_revision`, at most
  // `wait` (not bounded by the options' timeout). Returns the events (empty: none in time).
  // A revision etcd compacted away reports one Put event with an empty key (the caller rereads).
  std::vector<WatchEvent> wait_for_change(const std::string& key, const std::string& range_end,
                                          std::int64_t start_revision,
                                          std::chrono::milliseconds wait) override;

  // Whether any member answers at all (its status, which needs no leader; a refusal counts):
  // tells "etcd is there, without a leader" from "nothing answers".
  bool any_member_answers() override;
  // Asks every listed member's status at once, each on a connection of its own, all within one
  // deadline (the options' timeout, at most `within`): settles the job's cluster id and makes the
  // member that answered first the one tried first.
  void check_one_cluster(std::chrono::milliseconds within) override;

  const ClientOptions& options() const { return options_; }
  // The member the next call tries first: the last one that answered.
  std::size_t current_member() const override { return current_ % options_.endpoints.size(); }
  // The token for the options' user (authenticating first when there is none yet); empty
  // without a user. A refused user is an EtcdProtocolError naming it.
  std::string auth_token();

 private:
  struct Connection;
  // post_once with the user's token; a token etcd no longer knows (simple tokens expire after
  // --auth-token-ttl) is renewed once.
  std::string post(const char* path, const std::string& body);
  // POSTs `body` to `path` on some member; the reply's body. Retries on another member when one
  // does not answer, cannot connect, or says it has no leader, until the deadline.
  std::string post_once(const char* path, const std::string& body, const std::string& token);
  // post_once's steps. What the tries met, for the line that ends the call.
  struct CallFailures;
  // A round over every member failed: a short pause (on the client's io_context).
  void pause(std::chrono::milliseconds duration);
  // One request on the kept connection (a fresh one when closed) within `budget`: the reply's
  // HTTP status and body. Throws the transport's error.
  std::pair<unsigned, std::string> exchange(const Endpoint& at, const char* path,
                                            const std::string& body, const std::string& token,
                                            std::chrono::steady_clock::duration budget);
  // The reply when it is etcd's answer from the job's cluster; nullopt when it is that member's
  // failure (noted in `failures`). Throws EtcdRefused for etcd's final "no".
  std::optional<std::string> take_reply(const Endpoint& at, unsigned status, std::string reply,
                                        CallFailures& failures);
  // A transport failure of member `at` (noted in `failures`); true when the next member to try
  // was chosen already (one that answered while `at` hung). Throws when every member's reply
  // was over the bound.
  bool moved_on(const boost::system::error_code& code, std::exception_ptr failed,
                const Endpoint& at, const char* path, bool fresh,
                std::chrono::steady_clock::time_point until, CallFailures& failures);
  // No member answered within the deadline: the line that names why.
  [[noreturn]] void throw_unanswered(CallFailures& failures) const;
  void authenticate();
  // Asks every member but `skip` for its status at once until `deadline`; the first that
  // answered as a member of the job's cluster.
  std::optional<std::size_t> first_answering(std::size_t skip,
                                             std::chrono::steady_clock::time_point deadline);

  ClientOptions options_;
  boost::asio::io_context io_{1};
  std::shared_ptr<boost::asio::ssl::context> tls_;  // null: plain http
  std::unique_ptr<Connection> connection_;
  std::size_t current_ = 0;  // the member tried first
  std::string auth_token_;
};

// A streamed watch on [key, range_end) from `start_revision`, on a thread of its own. Messages
// arrive on that thread in order. The stream is known to be alive: it asks etcd for progress
// notifications, and a stream silent for `silence` (or one whose member sends nothing, not even
// "created", within the options' timeout) is dead. A dead or broken stream resumes on the next
// member from the last revision seen; a revision etcd compacted meanwhile is no failure: the
// owner re-reads its state (on_compacted) and the watch goes on from what it returns. When no
// member serves the watch for `give_up`, counted from when the stream broke, on_error is called
// once and the watch ends.
class EtcdWatch final : public EtcdWatchStream {
 public:
  using Callbacks = WatchCallbacks;
  using Timing = WatchTiming;
  EtcdWatch(ClientOptions options, std::string key, std::string range_end,
            std::int64_t start_revision, Timing timing, Callbacks callbacks);
  // Stops the watch and joins its thread; no callback runs after it returns.
  ~EtcdWatch() override;
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

 private:
  // What one member's stream did: said "created" (it served), or etcd compacted past it.
  struct Served {
    bool created = false;
    std::int64_t compacted = 0;  // > 0: etcd compacted what this watch needs
  };
  // The watch thread: streams from one member after another until stopped or given up.
  void run();
  // run's steps. Each that returns false has ended the watch (on_error said why, unless stopping).
  void fail(const std::string& why);
  // The token for the next stream ("" without a user, or when etcd did not answer: that try
  // fails); nullopt when etcd refused the user.
  std::optional<std::string> stream_token();
  // One stream from member `at` until it breaks, falls silent or is compacted.
  bool serve(const Endpoint& at, const std::string& token, std::chrono::milliseconds share,
             Served& served);
  // One message of that stream; whether to read on.
  bool on_stream_message(const WatchMessage& m, const Endpoint& at, MemberStream& stream,
                         Served& served);
  bool resume_after_compaction(std::int64_t compacted);
  // After a member's stream ended: gives up (no member served for the give-up) or picks the next.
  bool move_on(bool created);
  // The member to try after `left`.
  std::size_t next_member(std::size_t left) const;

  ClientOptions options_;
  std::string key_;
  std::string range_end_;
  std::int64_t next_revision_;
  Timing timing_;
  Callbacks callbacks_;
  boost::asio::io_context io_{1};
  std::shared_ptr<boost::asio::ssl::context> tls_;  // null: plain http
  std::atomic<bool> stopping_{false};
  // The watch thread's own state (run and its steps).
  std::size_t current_ = 0;  // the member streamed from (modulo the members)
  // Per member, when it last failed to serve (no "created", refused, unreachable): such a
  // member is tried after every member that served last time, the oldest failure first.
  std::vector<std::optional<std::chrono::steady_clock::time_point>> failed_at_;
  std::chrono::steady_clock::time_point broken_since_;
  std::string last_error_;
  std::thread thread_;  // last: it starts once the state above is built
};

// The real cluster: EtcdClients and EtcdWatches on `options`' members (a connection's timeout
// as asked).
class ClientCluster final : public EtcdCluster {
 public:
  explicit ClientCluster(ClientOptions options) : options_(std::move(options)) {
    if (!options_.book) options_.book = std::make_shared<MemberBook>();
  }
  std::unique_ptr<EtcdGateway> connect(std::chrono::milliseconds timeout) override;
  std::unique_ptr<EtcdWatchStream> watch(std::string key, std::string range_end,
                                         std::int64_t start_revision, WatchTiming timing,
                                         WatchCallbacks callbacks) override;
  const ClientOptions& options() const { return options_; }

 private:
  ClientOptions options_;
};

}  // namespace ddp::rdzv::etcd
