// The etcd client against the in-process fake gateway (fake/fake_etcd.hpp): a sick first member
// (each way a production member or a proxy in front of it fails) is left for the next one; one
// line names etcd, the member and the status; ranges come in pages, a stranger's huge values
// included; IPv6 members; the granted TTL; a watch that is known to be alive (a black-holed or
// silenced member is left, the give-up counts from the break, a compaction is re-read).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "fake/fake_etcd.hpp"
#include "rendezvous/etcd/etcd_client.hpp"

using namespace ddp::rdzv::etcd;
using namespace std::chrono_literals;
using fake::FakeEtcd;
using fake::Fault;

namespace {

ClientOptions options_for(const FakeEtcd& etcd, std::chrono::milliseconds timeout = 3s) {
  ClientOptions o;
  o.endpoints = parse_endpoints(etcd.endpoints());
  o.timeout = timeout;
  return o;
}

Fault status(unsigned code, std::string body = "<html>sick</html>") {
  Fault f;
  f.kind = Fault::Kind::Status;
  f.status = code;
  f.body = std::move(body);
  return f;
}

// Waits (bounded) until `done()`.
template <class F>
bool eventually(F done, std::chrono::milliseconds within = 10s) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

struct Seen {
  std::mutex m;
  std::vector<std::string> keys;
  std::vector<std::string> errors;
  std::atomic<int> compactions{0};
  bool has(const std::string& key) {
    std::lock_guard lock(m);
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  }
  std::size_t error_count() {
    std::lock_guard lock(m);
    return errors.size();
  }
  EtcdWatch::Callbacks callbacks(FakeEtcd* etcd = nullptr) {
    return EtcdWatch::Callbacks{[this](const WatchMessage& msg) {
                                  std::lock_guard lock(m);
                                  for (const auto& e : msg.events) keys.push_back(e.kv.key);
                                },
                                [this](const std::string& e) {
                                  std::lock_guard lock(m);
                                  errors.push_back(e);
                                },
                                [this, etcd](std::int64_t) -> std::int64_t {
                                  ++compactions;
                                  return etcd->revision() + 1;
                                }};
  }
};

}  // namespace

TEST_CASE("a sick first member is left for the next one, whatever it answers") {
  const std::vector<std::pair<const char*, Fault>> faults{
      {"503", status(503)},
      {"502", status(502)},
      {"500", status(500)},
      {"429", status(429)},
      {"404", status(404, "404 page not found")},
      {"200 not JSON", Fault{Fault::Kind::NotJson}},
      {"200 JSON of another service", status(200, R"({"hello":"world"})")},
      {"gRPC 14", status(503, fake::grpc_error_body(14, "etcdserver: no leader"))},
      {"gRPC 4", status(504, fake::grpc_error_body(4, "etcdserver: request timed out"))},
      {"gRPC 8", status(429, fake::grpc_error_body(8, "etcdserver: too many requests"))},
      {"black hole", Fault{Fault::Kind::BlackHole}},
  };
  for (const auto& [name, fault] : faults) {
    CAPTURE(name);
    FakeEtcd etcd(3);
    etcd.set_fault(0, fault);
    EtcdClient client(options_for(etcd));
    client.put("/j/a", "1");
    CHECK(client.range("/j/a").kvs.at(0).value == "1");
    CHECK(client.range("/j/", prefix_end("/j/")).kvs.size() == 1);
    CHECK(client.grant_lease(2).id != 0);
  }
}

TEST_CASE("every failure line names etcd, the member and the status") {
  FakeEtcd etcd(2);
  etcd.set_fault(0, status(503));
  etcd.set_fault(1, status(404, "404 page not found"));
  EtcdClient client(options_for(etcd, 1500ms));
  try {
    client.put("/j/a", "1");
    FAIL("no member can answer");
  } catch (const EtcdUnavailable& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("etcd at " + etcd.endpoints()) != std::string::npos);
    CHECK(what.find("HTTP 404") != std::string::npos);
    CHECK(what.find("not etcd's v3 JSON gateway") != std::string::npos);
    CHECK_FALSE(e.etcd_answered());
  }
  // etcd's own refusal is final, and names the member and the code.
  FakeEtcd one(1);
  one.set_fault(0, status(400, fake::grpc_error_body(3, "etcdserver: bad thing")));
  EtcdClient refused(options_for(one));
  try {
    refused.put("/j/a", "1");
    FAIL("etcd refused");
  } catch (const EtcdRefused& e) {
    const std::string what = e.what();
    CHECK(what.find("etcd member 127.0.0.1:") != std::string::npos);
    CHECK(what.find("HTTP 400 (gRPC 3 InvalidArgument): etcdserver: bad thing") !=
          std::string::npos);
  }
  // No leader anywhere: etcd answered (alive), and the client says so.
  FakeEtcd leaderless(2);
  for (int i = 0; i < 2; ++i)
    leaderless.set_fault(i, status(503, fake::grpc_error_body(14, "etcdserver: no leader")));
  EtcdClient waiting(options_for(leaderless, 1200ms));
  try {
    (void)waiting.keep_alive(1);
    FAIL("no leader");
  } catch (const EtcdUnavailable& e) {
    CHECK(e.etcd_answered());
  }
}

TEST_CASE("IPv6 members in brackets") {
  FakeEtcd etcd(2, /*ipv6=*/true);
  CHECK(etcd.endpoints().substr(0, 6) == "[::1]:");
  EtcdClient client(options_for(etcd));
  client.put("/v6", "yes");
  CHECK(client.range("/v6").kvs.at(0).value == "yes");
}

TEST_CASE("ranges come in pages: a stranger's huge values under the prefix are read") {
  FakeEtcd etcd(3);
  const std::string huge(1400 * 1000, 'x');  // 7 x 1.4 MB: more than Beast's default 8 MB
  for (int i = 0; i < 7; ++i) etcd.put("/job/stranger/" + std::to_string(i), huge);
  for (int i = 0; i < 100; ++i) etcd.put("/job/k/" + std::to_string(1000 + i), "v");
  EtcdClient client(options_for(etcd, 10s));
  const auto all = client.range("/job/", prefix_end("/job/"));
  CHECK(all.kvs.size() == 107);
  CHECK(all.kvs.front().key == "/job/k/1000");
  CHECK(all.kvs.back().value.size() == huge.size());
  int pages = 0;
  for (int m = 0; m < 3; ++m) pages += etcd.requests(m, "/v3/kv/range");
  CHECK(pages == 4);  // 107 keys, 32 a page
}

TEST_CASE("the TTL etcd granted, not the one asked") {
  FakeEtcd etcd(1);
  etcd.set_granted_ttl(8);
  EtcdClient client(options_for(etcd));
  const LeaseGrant grant = client.grant_lease(2);
  CHECK(grant.ttl == 8);
  CHECK(client.keep_alive(grant.id) == 8);
  etcd.expire_lease(grant.id);
  CHECK(client.keep_alive(grant.id) <= 0);
  CHECK_NOTHROW(client.revoke_lease(grant.id));  // already gone: etcd's NotFound, no failure
}

TEST_CASE("a watch starts past a black-holed member, and on the member it is told") {
  FakeEtcd etcd(3);
  etcd.set_fault(0, Fault{Fault::Kind::BlackHole});
  Seen seen;
  EtcdWatch::Timing timing{5s, 0ms, 0};
  EtcdWatch watch(options_for(etcd, 1s), "/w/", prefix_end("/w/"), etcd.revision() + 1, timing,
                  seen.callbacks(&etcd));
  REQUIRE(eventually([&] { return etcd.open_watches(1) + etcd.open_watches(2) == 1; }));
  etcd.put("/w/a", "1");
  CHECK(eventually([&] { return seen.has("/w/a"); }));
  CHECK(seen.error_count() == 0);

  Seen second;
  EtcdWatch on_two(options_for(etcd, 1s), "/w/", prefix_end("/w/"), etcd.revision() + 1,
                   EtcdWatch::Timing{5s, 0ms, 2}, second.callbacks(&etcd));
  CHECK(eventually([&] { return etcd.open_watches(2) >= 1; }));
  CHECK(etcd.requests(0, "/v3/watch") == 1);  // only the first watch tried the black hole
}

TEST_CASE("a silenced watch is dead: the watch moves on and loses no event") {
  FakeEtcd etcd(2);
  Seen seen;
  EtcdWatch watch(options_for(etcd, 1s), "/w/", prefix_end("/w/"), etcd.revision() + 1,
                  EtcdWatch::Timing{10s, 700ms, 0}, seen.callbacks(&etcd));
  REQUIRE(eventually([&] { return etcd.open_watches(0) == 1; }));
  etcd.set_fault(0, Fault{Fault::Kind::None, 0, {}, /*silence_watches=*/true});
  etcd.put("/w/lost-node", "x");  // member 0 never sends it
  CHECK(eventually([&] { return seen.has("/w/lost-node"); }));
  CHECK(etcd.requests(1, "/v3/watch") >= 1);
  CHECK(seen.error_count() == 0);
}

TEST_CASE("the give-up counts from the break, not from the last message") {
  FakeEtcd etcd(3);
  etcd.set_fault(2, status(503));  // a dead address listed after the watched member
  Seen seen;
  EtcdWatch watch(options_for(etcd, 1s), "/w/", prefix_end("/w/"), etcd.revision() + 1,
                  EtcdWatch::Timing{1500ms, 0ms, 0}, seen.callbacks(&etcd));
  REQUIRE(eventually([&] { return etcd.open_watches(0) == 1; }));
  std::this_thread::sleep_for(2500ms);  // a quiet stretch longer than the give-up
  etcd.set_fault(0, status(503));       // the watched member goes (its stream, and new ones)
  etcd.drop_watches(0);
  etcd.put("/w/after", "1");
  CHECK(eventually([&] { return seen.has("/w/after"); }));
  CHECK(seen.error_count() == 0);
}

TEST_CASE("a compacted watch is re-read, never a lost job") {
  FakeEtcd etcd(2);
  Seen seen;
  const auto from = etcd.revision() + 1;
  etcd.put("/w/before", "1");
  etcd.compact();  // the watch's start revision is gone
  EtcdWatch watch(options_for(etcd, 1s), "/w/", prefix_end("/w/"), from,
                  EtcdWatch::Timing{2s, 0ms, 0}, seen.callbacks(&etcd));
  CHECK(eventually([&] { return seen.compactions.load() == 1; }));
  etcd.put("/w/after", "1");
  CHECK(eventually([&] { return seen.has("/w/after"); }));
  CHECK(seen.error_count() == 0);
}

TEST_CASE("a SIGSTOPped watched member is left for the others within the give-up") {
  // As the session sets it: the options' timeout (read_timeout, heartbeat_timeout) is no less
  // than the give-up (the lease's TTL), and a quiet healthy stream is left at `silence`, so the
  // watch goes round the members. Member 0 stops: its stream goes silent, and a new connection
  // is accepted by the kernel and never answered. The old code tried it again after the others
  // with the whole options' timeout for "created": more than the give-up, a lost job.
  FakeEtcd etcd(3);
  Seen seen;
  EtcdWatch watch(options_for(etcd, 3s), "/w/", prefix_end("/w/"), etcd.revision() + 1,
                  EtcdWatch::Timing{1500ms, 700ms, 0}, seen.callbacks(&etcd));
  REQUIRE(eventually([&] { return etcd.open_watches(0) == 1; }));
  etcd.set_fault(0, Fault{Fault::Kind::BlackHole, 0, {}, /*silence_watches=*/true});
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(700ms);
    etcd.put(fmt::format("/w/k{}", i), "1");
  }
  CHECK(eventually([&] { return seen.has("/w/k7"); }));
  for (int i = 0; i < 8; ++i) CHECK(seen.has(fmt::format("/w/k{}", i)));
  CHECK(seen.error_count() == 0);
  CHECK(etcd.requests(0, "/v3/watch") <= 2);  // the stopped member: once at most after its stop
}

TEST_CASE("a member announcing a reply over the bound is left for the next one") {
  FakeEtcd etcd(3);
  etcd.put("/k", "v");
  etcd.set_fault(0, Fault{Fault::Kind::HugeLength});
  EtcdClient client(options_for(etcd, 3s));
  CHECK(client.range("/k").kvs.size() == 1);
  CHECK(client.put("/k2", "v") > 0);
  // Every member over the bound: the line names the bound.
  etcd.set_fault(1, Fault{Fault::Kind::HugeLength});
  etcd.set_fault(2, Fault{Fault::Kind::HugeLength});
  EtcdClient all_over(options_for(etcd, 3s));
  try {
    (void)all_over.range("/k");
    FAIL("expected an error");
  } catch (const EtcdProtocolError& e) {
    CHECK(std::string(e.what()).find("64 MiB") != std::string::npos);
  }
}

TEST_CASE("a keys-only range reads the names, not a stranger's huge values beside them") {
  FakeEtcd etcd(1);
  etcd.put("/r0/alive/1", "");
  etcd.put("/r0/alive/zz", std::string(1400 * 1024, 'x'));
  EtcdClient client(options_for(etcd));
  const auto keys = client.range("/r0/alive/", prefix_end("/r0/alive/"), true);
  REQUIRE(keys.kvs.size() == 2);
  CHECK(keys.kvs[1].key == "/r0/alive/zz");
  CHECK(keys.kvs[1].value.empty());
  CHECK(keys.kvs[1].mod_revision > 0);
  CHECK(client.range("/r0/alive/zz").kvs.at(0).value.size() == 1400 * 1024);
}

TEST_CASE("members of two etcd clusters are one line naming both, not a job split in two") {
  FakeEtcd etcd(3);
  EtcdClient client(options_for(etcd));
  CHECK_NOTHROW(client.check_one_cluster(3s));  // one cluster: nothing to say
  etcd.set_fault(1, Fault{Fault::Kind::BlackHole, 503, {}, false});
  etcd.set_cluster_id(2, "999");
  const auto endpoints = parse_endpoints(etcd.endpoints());
  try {
    client.check_one_cluster(3s);
    FAIL("two clusters passed the check");
  } catch (const EtcdProtocolError& e) {
    const std::string line = e.what();
    CHECK(line.find(endpoints[0].name()) != std::string::npos);
    CHECK(line.find(endpoints[2].name()) != std::string::npos);
    CHECK(line.find("999") != std::string::npos);
    CHECK(line.find("different etcd clusters") != std::string::npos);
  }
}

TEST_CASE("black holes listed before a healthy member: the first check is one deadline for all") {
  // Breaker F1/F2: each member that does not answer added its own share (0.5 s) to the first
  // join's check, and the calls after it went through the black holes one by one until their
  // deadline ran out, though a healthy member followed them.
  FakeEtcd etcd(21);
  for (int m = 0; m < 20; ++m) etcd.set_fault(m, Fault{Fault::Kind::BlackHole, 503, {}, false});
  ClientCluster cluster(options_for(etcd, 2s));
  auto client = cluster.connect(2s);
  const auto started = std::chrono::steady_clock::now();
  client->check_one_cluster(60s);
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took < 6s);  // 2 s for all (before: 20 x 0.5 s = 10 s)
  CHECK(client->current_member() == 20);
  CHECK_NOTHROW(client->put("/k", "v"));
  // A client made later (the keepalive's, the watch's) starts on the member that answered.
  auto later = cluster.connect(1s);
  CHECK(later->current_member() == 20);
  CHECK(later->range("/k").kvs.at(0).value == "v");
  // Bounded by the join's deadline too, when that is shorter.
  const auto again = std::chrono::steady_clock::now();
  client->check_one_cluster(300ms);
  CHECK(std::chrono::steady_clock::now() - again < 1500ms);
}

TEST_CASE("a call past black holes: after the first one's share, the first member to answer") {
  FakeEtcd etcd(7);
  for (int m = 0; m < 6; ++m) etcd.set_fault(m, Fault{Fault::Kind::BlackHole, 503, {}, false});
  EtcdClient client(options_for(etcd, 2s));  // no check: the calls start at the first listed
  // Before: 6 shares of 0.5 s for a 2 s call, which ended "did not answer" before member 6.
  CHECK_NOTHROW(client.put("/k", "v"));
  CHECK(etcd.requests(6, "/v3/kv/put") == 1);
  CHECK(client.current_member() == 6);
}

TEST_CASE("a member of another cluster, silent at the first check, is no member of this job's") {
  // Breaker F4: a member of another etcd cluster that did not answer the first join's check was
  // not checked again: a failover to it moved the job to another cluster's keys and leases.
  FakeEtcd etcd(3);
  etcd.set_fault(1, Fault{Fault::Kind::BlackHole, 503, {}, false});
  ClientCluster cluster(options_for(etcd, 2s));
  auto client = cluster.connect(2s);
  client->check_one_cluster(2s);  // members 0 and 2: the job's cluster
  etcd.set_fault(1, Fault{});
  etcd.set_cluster_id(1, "999");  // member 1 answers now: another cluster's
  etcd.set_fault(0, status(503));
  CHECK_NOTHROW(client->put("/k", "v"));  // member 1 is passed over, member 2 serves it
  CHECK(etcd.requests(1, "/v3/kv/put") == 1);
  CHECK(etcd.requests(2, "/v3/kv/put") == 1);
  etcd.set_fault(2, status(503));
  // No member of the job's cluster left: one line naming both cluster ids.
  try {
    (void)client->range("/k");
    FAIL("another cluster's member served the job");
  } catch (const EtcdUnavailable& e) {
    const std::string line = e.what();
    CAPTURE(line);
    CHECK(line.find("no member of this job's etcd cluster") != std::string::npos);
    CHECK(line.find("cluster 999") != std::string::npos);
    CHECK(line.find("14841639068965178418") != std::string::npos);
    CHECK(line.find(parse_endpoints(etcd.endpoints())[1].name()) != std::string::npos);
    CHECK_FALSE(e.etcd_answered());
  }
  // A watch is not served by it either: started on it, it moves to a member of the job's.
  etcd.set_fault(0, Fault{});
  etcd.set_fault(2, Fault{});
  Seen seen;
  WatchTiming timing;
  timing.give_up = 5s;
  timing.first_member = 1;
  auto watch =
      cluster.watch("/w/", prefix_end("/w/"), etcd.revision() + 1, timing, seen.callbacks(&etcd));
  REQUIRE(eventually([&] { return etcd.open_watches(0) + etcd.open_watches(2) == 1; }));
  etcd.put("/w/1", "x");
  CHECK(eventually([&] { return seen.has("/w/1"); }));
  CHECK(seen.error_count() == 0);
}
