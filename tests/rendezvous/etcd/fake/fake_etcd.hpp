#pragma once

// An in-process fake of etcd's v3 JSON gateway, for the client's unit tests: the subset ddprun
// speaks (kv range with pages, put, deleterange, lease grant/keepalive/revoke, maintenance
// status, streamed watch with progress and compaction), served by N "members" on loopback that
// share one key space. Each member can be made sick the ways a production etcd is: accept and
// never answer, answer an HTTP status or a gRPC error body, answer what is not JSON, silence or
// drop its watches; the cluster can compact, expire a lease, grant another TTL. Boost.Beast on a
// thread of its own; every method is safe from the test's thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp::rdzv::etcd::fake {

struct Fault {
  enum class Kind {
    None,
    BlackHole,   // accepts TCP, reads the request, never answers
    Status,      // answers `status` with `body` (e.g. 503 with the gateway's code-14 body)
    NotJson,     // answers 200 with an HTML page
    HugeLength,  // answers 200 announcing a Content-Length of 99999999999999, then closes
  };
  Kind kind = Kind::None;
  unsigned status = 503;
  std::string body;
  bool silence_watches = false;  // a watch gets "created", then nothing
};

// The gateway's error body for gRPC `code`.
std::string grpc_error_body(int code, const std::string& message);

class FakeEtcd {
 public:
  // `members` servers on 127.0.0.1 (or ::1) on free ports.
  explicit FakeEtcd(int members, bool ipv6 = false);
  ~FakeEtcd();
  FakeEtcd(const FakeEtcd&) = delete;
  FakeEtcd& operator=(const FakeEtcd&) = delete;

  // "127.0.0.1:P1,127.0.0.1:P2,..." ("[::1]:P1,..." for ipv6).
  std::string endpoints() const;
  void set_fault(int member, Fault fault);
  // Closes every open watch stream of `member` (a member restarting).
  void drop_watches(int member);
  // The cluster id in every reply's header of member `member` (empty: none; by default every
  // member reports the same one).
  void set_cluster_id(int member, std::string id);
  // The TTL every later lease grant gets (0: the one asked).
  void set_granted_ttl(std::int64_t ttl);
  // Compacts the history up to the current revision: a watch from before it is cancelled with
  // compact_revision (as etcd does), a range at an older revision is refused (code 11).
  void compact();
  // The lease ends now, its keys deleted (as etcd does at its TTL).
  void expire_lease(std::int64_t id);
  std::int64_t put(const std::string& key, const std::string& value);
  void erase(const std::string& key);
  std::int64_t revision() const;
  // How many requests for `path` (e.g. "/v3/kv/range") member `member` answered or held.
  int requests(int member, const std::string& path) const;
  // How many watch streams are open on `member` now.
  int open_watches(int member) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ddp::rdzv::etcd::fake
