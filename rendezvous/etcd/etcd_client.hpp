#pragma once

// A small etcd v3 client over the JSON gateway (HTTP/1.1 keep-alive, Boost.Beast): range, put,
// delete, txn, leases and watches. Blocking calls with a deadline each (run on the caller's
// thread on a private io_context), failing over across the listed members; a streamed watch
// runs on a thread of its own (EtcdWatch). The codec (etcd_codec.hpp) is the pure half.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/etcd/etcd_codec.hpp"

namespace boost::asio::ssl {
class context;
}

namespace ddp::rdzv::etcd {

struct Endpoint {
  std::string host;
  std::uint16_t port = 2379;
  bool https = false;  // written as https://
};

// "[http://|https://]host:port[,...]" (a missing port is etcd's 2379); throws
// std::invalid_argument, also for a list that mixes http:// and https://.
std::vector<Endpoint> parse_endpoints(std::string_view text);
std::string describe(const std::vector<Endpoint>& endpoints);  // "h1:p1,h2:p2"

// No member of the cluster answered within the call's deadline (or quorum is lost: members
// answer, but cannot commit).
class EtcdUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ClientOptions {
  std::vector<Endpoint> endpoints;
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

class EtcdClient {
 public:
  explicit EtcdClient(ClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  RangeReply range(const std::string& key, const std::string& range_end = {});
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  std::int64_t erase(const std::string& key, const std::string& range_end = {});
  TxnReply txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
               const std::vector<Op>& failure = {});
  std::int64_t grant_lease(std::int64_t ttl_seconds);
  // The TTL left; 0 when the lease has expired (or was revoked).
  std::int64_t keep_alive(std::int64_t lease);
  void revoke_lease(std::int64_t lease);
  // Waits until something under [key, range_end) changes at or after `start_revision`, at most
  // `wait` (not bounded by the options' timeout). Returns the events (empty: none in time).
  // A revision etcd compacted away reports one Put event with an empty key (the caller rereads).
  std::vector<WatchEvent> wait_for_change(const std::string& key, const std::string& range_end,
                                          std::int64_t start_revision,
                                          std::chrono::milliseconds wait);

  const ClientOptions& options() const { return options_; }
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
  void authenticate();

  ClientOptions options_;
  boost::asio::io_context io_{1};
  std::shared_ptr<boost::asio::ssl::context> tls_;  // null: plain http
  std::unique_ptr<Connection> connection_;
  std::size_t current_ = 0;  // the member tried first
  std::string auth_token_;
};

// A streamed watch on [key, range_end) from `start_revision`, on a thread of its own. Messages
// arrive on that thread in order. When the member it reads from goes away, it resumes on the
// next member from the last revision seen; when no member answers for `give_up`, on_error is
// called once and the watch ends.
class EtcdWatch {
 public:
  struct Callbacks {
    std::function<void(const WatchMessage&)> on_message;
    std::function<void(const std::string&)> on_error;
  };
  EtcdWatch(ClientOptions options, std::string key, std::string range_end,
            std::int64_t start_revision, std::chrono::milliseconds give_up, Callbacks callbacks);
  // Stops the watch and joins its thread; no callback runs after it returns.
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

 private:
  void run();
  ClientOptions options_;
  std::string key_;
  std::string range_end_;
  std::int64_t next_revision_;
  std::chrono::milliseconds give_up_;
  Callbacks callbacks_;
  boost::asio::io_context io_{1};
  std::shared_ptr<boost::asio::ssl::context> tls_;  // null: plain http
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ddp::rdzv::etcd
