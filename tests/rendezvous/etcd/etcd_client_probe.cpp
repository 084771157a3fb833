// Drives EtcdClient / EtcdWatch against a real etcd cluster for etcd_client_test.py. Every line
// it prints is one fact the test checks; an etcd failure prints one line and exits 69.
//   probe ENDPOINTS basic PREFIX
//   probe ENDPOINTS race PREFIX ROUNDS ME DELAY_MS   (prints "wins N")
//   probe ENDPOINTS join-race PREFIX ROUNDS ME MAX_DELAY_MS NODES
//                                         (prints "round I <the closed record>" per round)
//   probe ENDPOINTS watch PREFIX SECONDS             (prints "put KEY VALUE" / "delete KEY")
//   probe ENDPOINTS lease KEY TTL SECONDS            (keeps KEY alive SECONDS, then exits)
//   probe ENDPOINTS put KEY VALUE TIMEOUT_MS
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <random>

#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_round.hpp"

using namespace ddp::rdzv::etcd;
using namespace std::chrono_literals;

namespace {
void expect(bool ok, const std::string& what) {
  if (!ok) {
    fmt::print("FAILED {}\n", what);
    std::exit(1);
  }
  fmt::print("ok {}\n", what);
}

int basic(EtcdClient& c, const std::string& p) {
  const std::string bin("v\0\xff|", 4);
  c.put(p + "a", bin);
  auto r = c.range(p + "a");
  expect(r.kvs.size() == 1 && r.kvs[0].value == bin, "put/range binary value");
  c.put(p + "b", "2");
  expect(c.range(p, prefix_end(p)).kvs.size() == 2, "prefix range");
  // create-if-absent: one winner
  auto first = c.txn({Compare{p + "c", Compare::Target::Create, 0, {}}}, {put_op(p + "c", "1")},
                     {range_op(p + "c")});
  auto second = c.txn({Compare{p + "c", Compare::Target::Create, 0, {}}}, {put_op(p + "c", "2")},
                      {range_op(p + "c")});
  expect(first.succeeded && !second.succeeded && second.ranges.at(0).kvs.at(0).value == "1",
         "txn create-if-absent has one winner");
  const auto mod = c.range(p + "c").kvs.at(0).mod_revision;
  expect(c.txn({Compare{p + "c", Compare::Target::Mod, mod, {}}}, {put_op(p + "c", "3")}).succeeded,
         "txn compare mod revision");
  expect(
      !c.txn({Compare{p + "c", Compare::Target::Mod, mod, {}}}, {put_op(p + "c", "4")}).succeeded,
      "a stale mod revision loses");
  const auto lease = c.grant_lease(2).id;
  c.put(p + "leased", "x", lease);
  expect(c.keep_alive(lease) > 0, "keepalive renews");
  const auto since = c.range(p + "leased").revision + 1;
  std::this_thread::sleep_for(200ms);
  c.revoke_lease(lease);
  auto events = c.wait_for_change(p + "leased", "", since, 5s);
  expect(events.size() == 1 && events[0].type == WatchEvent::Type::Delete,
         "revoking the lease deletes its key, seen by a watch");
  expect(c.keep_alive(lease) == 0, "keepalive of a revoked lease reports 0");
  auto quiet = c.wait_for_change(p + "nothing", "", 0, 300ms);
  expect(quiet.empty(), "a watch with nothing to report ends at its deadline");
  c.erase(p, prefix_end(p));
  expect(c.range(p, prefix_end(p)).kvs.empty(), "delete range");
  return 0;
}

int race(EtcdClient& c, const std::string& p, int rounds, const std::string& me, int delay_ms) {
  int wins = 0;
  for (int i = 0; i < rounds; ++i) {
    const std::string key = fmt::format("{}decision/{}", p, i);
    // Read, pause (the other racer reads the same state), then decide by one txn.
    auto seen = c.range(key);
    const std::int64_t created = seen.kvs.empty() ? 0 : seen.kvs[0].create_revision;
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (created != 0) continue;
    auto t =
        c.txn({Compare{key, Compare::Target::Create, 0, {}}}, {put_op(key, me)}, {range_op(key)});
    if (t.succeeded) ++wins;
  }
  fmt::print("wins {}\n", wins);
  return 0;
}

// Racers join the same rounds of NODES nodes with the agents' decisions (join_step, which closes
// the round once it is full, on a sealed record), reading, pausing a random 0..MAX_DELAY_MS, then
// writing by one txn that compares the record's mod revision, as EtcdSession::form_round does.
// Racer ME (a lease-like id) publishes ME as the job's budgets, so the closed record must carry
// the largest. The test compares every racer's view of every closed round.
int join_race(EtcdClient& c, const std::string& p, int rounds, std::int64_t me, int max_delay_ms,
              int nodes) {
  std::mt19937 rng(static_cast<unsigned>(me));
  const std::string token = "race-token";
  const RoundMember member{me, fmt::format("node{}", me), 1, -1, "s"};
  const RoundShape shape{nodes, nodes, static_cast<int>(me), static_cast<int>(me)};
  for (int i = 0; i < rounds; ++i) {
    const std::string key = fmt::format("{}round/{}", p, i);
    for (;;) {
      auto read = c.range(key);
      std::optional<RoundRecord> current;
      std::int64_t mod = 0;
      if (!read.kvs.empty()) {
        mod = read.kvs[0].mod_revision;
        if (auto payload = unseal(token, key, read.kvs[0].value)) current = decode_round(*payload);
        expect(current.has_value(), "the record decodes");
      }
      const JoinStep step = join_step(current, member, shape);
      if (step.kind == JoinStep::Kind::Joined) {
        if (!current->open) {
          fmt::print("round {} {}\n", i, encode_round(*current));
          break;
        }
        (void)c.wait_for_change(key, "", read.revision + 1, 2s);
        continue;
      }
      if (step.kind != JoinStep::Kind::Write) {
        fmt::print("FAILED round {}: {} ({})\n", i, step.reason,
                   step.kind == JoinStep::Kind::Closed ? "closed without this racer" : "refused");
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % (max_delay_ms + 1)));
      const Compare same = mod == 0 ? Compare{key, Compare::Target::Create, 0, {}}
                                    : Compare{key, Compare::Target::Mod, mod, {}};
      (void)c.txn({same}, {put_op(key, seal(token, key, encode_round(step.next)))});
    }
  }
  return 0;
}

int watch(const ClientOptions& o, const std::string& p, int seconds) {
  EtcdClient c(o);
  const auto from = c.range(p).revision + 1;
  std::atomic<bool> failed{false};
  EtcdWatch w(o, p, prefix_end(p), from, EtcdWatch::Timing{10s, 0s, 0},
              {[](const WatchMessage& m) {
                 for (const auto& e : m.events) {
                   if (e.type == WatchEvent::Type::Put)
                     fmt::print("put {} {}\n", e.kv.key, e.kv.value);
                   else
                     fmt::print("delete {}\n", e.kv.key);
                 }
                 std::fflush(stdout);
               },
               [&](const std::string& error) {
                 fmt::print("error {}\n", error);
                 std::fflush(stdout);
                 failed = true;
               }});
  fmt::print("watching\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  return failed ? 69 : 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: probe ENDPOINTS COMMAND ARGS...\n");
    return 2;
  }
  ClientOptions o;
  o.endpoints = parse_endpoints(argv[1]);
  const std::string cmd = argv[2];
  try {
    if (cmd == "put") {
      o.timeout = std::chrono::milliseconds(std::atoi(argv[5]));
      EtcdClient c(o);
      c.put(argv[3], argv[4]);
      fmt::print("ok put\n");
      return 0;
    }
    if (cmd == "watch") return watch(o, argv[3], std::atoi(argv[4]));
    EtcdClient c(o);
    if (cmd == "basic") return basic(c, argv[3]);
    if (cmd == "race") return race(c, argv[3], std::atoi(argv[4]), argv[5], std::atoi(argv[6]));
    if (cmd == "join-race") {
      return join_race(c, argv[3], std::atoi(argv[4]), std::atoll(argv[5]), std::atoi(argv[6]),
                       std::atoi(argv[7]));
    }
    if (cmd == "lease") {
      const auto lease = c.grant_lease(std::atoi(argv[4])).id;
      c.put(argv[3], "alive", lease);
      fmt::print("leased\n");
      std::fflush(stdout);
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[5]));
      while (std::chrono::steady_clock::now() < end) {
        expect(c.keep_alive(lease) > 0, "keepalive");
        std::fflush(stdout);
        std::this_thread::sleep_for(500ms);
      }
      return 0;
    }
  } catch (const EtcdUnavailable& e) {
    fmt::print("unavailable {}\n", e.what());
    return 69;
  } catch (const std::exception& e) {
    fmt::print("error {}\n", e.what());
    return 70;
  }
  return 2;
}
