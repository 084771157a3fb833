// The proxy's multiplexed WAITs: the watch link's bookkeeping and framing (pure).
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/codec.hpp"
#include "rendezvous/command_handler.hpp"
#include "rendezvous/proxy/reply_reader.hpp"
#include "rendezvous/proxy/wait_table.hpp"

using namespace ddp::rdzv;
using namespace ddp::rdzv::proxy;

namespace {

using Ids = std::vector<std::uint64_t>;

std::string notification(WatchEventType type, const std::string& key, const std::string& old_value,
                         const std::string& new_value) {
  return encode_watch_event(type, key, old_value, new_value);
}

}  // namespace

TEST_CASE("wait table: a key is watched once, then probed with every WAIT of the batch") {
  WaitTable t(16);
  CHECK(t.add(1, {"/a", "/b", "/a"}));  // duplicates count once
  CHECK(t.add(2, {"/b"}));
  auto b = t.take_batch();
  CHECK(b.watch == std::vector<std::string>{"/a", "/b"});
  CHECK(b.has_probe);
  CHECK(b.waits == 2);
  CHECK(b.probe == std::vector<std::string>{"/a", "/b"});
  CHECK(t.watched_keys() == 2);
  // A later WAIT on a watched key: no WATCH_KEY again, but a PROBE of its own (it arrived later).
  CHECK(t.add(3, {"/a"}));
  auto b2 = t.take_batch();
  CHECK(b2.watch.empty());
  CHECK(b2.probe == std::vector<std::string>{"/a"});
  // Nothing new: nothing to send.
  auto b3 = t.take_batch();
  CHECK(b3.watch.empty());
  CHECK_FALSE(b3.has_probe);
}

TEST_CASE(
    "wait table: the PROBE answers the WAITs whose keys all exist, the rest wait for events") {
  WaitTable t(16);
  t.add(1, {"/a", "/b"});
  t.add(2, {"/b"});
  t.add(3, {"/a"});
  t.take_batch();
  CHECK(t.on_probe_reply({true, false}) == Ids{3});  // /a exists, /b does not
  CHECK(t.pending() == 2);
  // A deletion answers nothing; a creation of /b answers both (1 already saw /a).
  CHECK(t.on_event("/b", WatchEventType::KeyDeleted).empty());
  auto done = t.on_event("/b", WatchEventType::KeyCreated);
  std::sort(done.begin(), done.end());
  CHECK(done == Ids{1, 2});
  CHECK(t.pending() == 0);
  CHECK(t.quiescent());
}

TEST_CASE("wait table: notifications before a WAIT's PROBE reply do not answer it") {
  // The key may have been set, and deleted again, before the WAIT arrived: only what follows the
  // PROBE's point in the link's stream counts.
  WaitTable t(16);
  t.add(1, {"/k"});
  t.take_batch();
  CHECK(t.on_event("/k", WatchEventType::KeyCreated).empty());
  CHECK(t.on_event("/k", WatchEventType::KeyDeleted).empty());
  CHECK(t.on_probe_reply({false}).empty());
  CHECK(t.on_event("/k", WatchEventType::KeyUpdated) == Ids{1});
}

TEST_CASE("wait table: two PROBEs out, answered in order, each for its own WAITs") {
  WaitTable t(16);
  t.add(1, {"/k"});
  t.take_batch();
  t.add(2, {"/k"});
  t.take_batch();
  CHECK(t.probes_outstanding() == 2);
  CHECK(t.on_probe_reply({false}).empty());  // WAIT 1 armed
  // /k created between the two PROBEs: answers WAIT 1 only; WAIT 2's PROBE then sees /k.
  CHECK(t.on_event("/k", WatchEventType::KeyCreated) == Ids{1});
  CHECK(t.on_probe_reply({true}) == Ids{2});
}

TEST_CASE("wait table: a cancelled WAIT is never answered, before or after its PROBE") {
  WaitTable t(16);
  t.add(1, {"/k"});
  t.add(2, {"/k"});
  t.cancel(1);
  auto b = t.take_batch();
  CHECK(b.waits == 1);
  CHECK(t.on_probe_reply({false}).empty());
  t.cancel(2);
  CHECK(t.on_event("/k", WatchEventType::KeyCreated).empty());
  CHECK(t.pending() == 0);
}

TEST_CASE("wait table: the watched-key bound refuses a WAIT whole, keys already watched are free") {
  WaitTable t(2);
  CHECK(t.add(1, {"/a", "/b"}));
  CHECK_FALSE(t.add(2, {"/a", "/c"}));  // /c would be a third key
  CHECK(t.pending() == 1);
  CHECK(t.add(3, {"/b", "/a"}));
  auto b = t.take_batch();
  CHECK(b.watch.size() == 2);
  CHECK(b.waits == 2);
}

TEST_CASE(
    "wait table: a WAIT on no keys is answered by its PROBE, and events nobody waits on are "
    "counted") {
  WaitTable t(4);
  t.add(7, {});
  auto b = t.take_batch();
  CHECK(b.has_probe);
  CHECK(b.probe.empty());
  CHECK(t.on_probe_reply({}) == Ids{7});
  CHECK(t.on_event("/x", WatchEventType::KeyUpdated).empty());
  CHECK(t.idle_events() == 1);
  CHECK_THROWS_AS(t.on_probe_reply({}), std::runtime_error);  // no PROBE out
}

TEST_CASE("wait table: a cancelled armed WAIT leaves nothing behind (no per-key leftovers)") {
  WaitTable t(1000);
  for (std::uint64_t round = 1; round <= 50; ++round) {
    std::vector<std::string> keys;
    for (int i = 0; i < 20; ++i)
      keys.push_back("r" + std::to_string(round) + "/" + std::to_string(i));
    REQUIRE(t.add(round, keys));
    auto b = t.take_batch();
    CHECK(t.on_probe_reply(std::vector<bool>(b.probe.size(), false)).empty());
    CHECK(t.armed_keys() == 20);
    t.cancel(round);
    CHECK(t.armed_keys() == 0);
    CHECK(t.pending() == 0);
    t.take_unwatch();
  }
  CHECK(t.watched_keys() == 0);
}

TEST_CASE("wait table: one WAIT of 131072 keys, duplicates folded, answered key by key") {
  WaitTable t(300000);
  std::vector<std::string> keys;
  for (int i = 0; i < 131072; ++i) keys.push_back("k" + std::to_string(i % 100000));
  REQUIRE(t.add(1, keys));
  auto b = t.take_batch();
  CHECK(b.watch.size() == 100000);
  CHECK(b.probe.size() == 100000);
  CHECK(t.on_probe_reply(std::vector<bool>(b.probe.size(), false)).empty());
  for (int i = 0; i < 99999; ++i)
    CHECK(t.on_event("k" + std::to_string(i), WatchEventType::KeyCreated).empty());
  CHECK(t.on_event("k99999", WatchEventType::KeyUpdated) == std::vector<std::uint64_t>{1});
  CHECK(t.armed_keys() == 0);
}

TEST_CASE("wait table: a batch's PROBE stays within the per-request key bound, WAITs whole") {
  WaitTable t(100);
  REQUIRE(t.add(1, {"a", "b"}));
  REQUIRE(t.add(2, {"c", "d"}));
  REQUIRE(t.add(3, {"a", "e"}));
  auto first = t.take_batch(3);
  CHECK(first.probe == std::vector<std::string>{"a", "b"});
  CHECK(first.watch.size() == 5);
  auto second = t.take_batch(3);
  CHECK(second.probe == std::vector<std::string>{"c", "d"});
  auto third = t.take_batch(3);
  CHECK(third.probe == std::vector<std::string>{"a", "e"});
  CHECK(t.take_batch(3).empty());
}

TEST_CASE("PROBE: G1 and G2, and ddprun-store answers it with the tag and one byte per key") {
  CHECK(has_op(Generation::G1, Op::Probe));
  CHECK(has_op(Generation::G2, Op::Probe));
  CHECK(op_from_wire(Generation::G1, kG1ProbeWire) == Op::Probe);
  CHECK(reply_shape(Op::Probe) == ReplyShape::Probe);
  StoreModel model;
  Effects fx;
  model.set("/a", "1", fx);
  auto out = handle_command(model, 1, Generation::G1,
                            Command{Op::Probe, {"/a", "/b", "/a"}, {}, 0, 0}, true, StoreLimits{});
  CHECK_FALSE(out.close_reason);
  CHECK(out.reply == std::string("\x04\x01\x00\x01", 4));
  // Round trip through the codec.
  const Command probe{Op::Probe, {"/a", "/b"}, {}, 0, 0};
  RequestDecoder dec(Generation::G1, StoreLimits{});
  const std::string wire = encode_request(Generation::G1, probe);
  CHECK(static_cast<std::uint8_t>(wire[0]) == kG1ProbeWire);
  auto step = dec.feed(wire);
  REQUIRE(step.status == DecodeStatus::Ok);
  CHECK(dec.take() == probe);
}

TEST_CASE("wait table: past half the bound, keys nobody waits on are unwatched; needed ones stay") {
  WaitTable t(4);
  CHECK(t.add(1, {"/a"}));
  CHECK(t.add(2, {"/b"}));
  CHECK(t.add(3, {"/c"}));
  auto b = t.take_batch();
  CHECK(b.watch == std::vector<std::string>{"/a", "/b", "/c"});
  CHECK(t.on_probe_reply({false, false, false}).empty());
  CHECK(t.on_event("/a", WatchEventType::KeyCreated) == Ids{1});
  CHECK(t.on_event("/b", WatchEventType::KeyCreated) == Ids{2});
  CHECK(t.unwatch_due());                                           // 3 of 4 watched
  CHECK(t.take_unwatch() == std::vector<std::string>{"/a", "/b"});  // /c: WAIT 3 needs it
  CHECK(t.watched_keys() == 1);
  CHECK_FALSE(t.unwatch_due());
  // A later WAIT on an unwatched key watches it again, before its PROBE.
  CHECK(t.add(4, {"/a"}));
  b = t.take_batch();
  CHECK(b.watch == std::vector<std::string>{"/a"});
  CHECK(b.probe == std::vector<std::string>{"/a"});
  // Keys of a WAIT whose PROBE is out are needed too; nothing is shed while the count has not
  // grown since the last shedding.
  CHECK(t.add(5, {"/d"}));
  t.take_batch();
  CHECK(t.watched_keys() == 3);
  CHECK(t.unwatch_due());
  CHECK(t.take_unwatch().empty());
  CHECK_FALSE(t.unwatch_due());
  CHECK(t.on_probe_reply({true}) == Ids{4});
  CHECK(t.on_probe_reply({false}).empty());
  CHECK(t.on_event("/c", WatchEventType::KeyUpdated) == Ids{3});
  CHECK(t.on_event("/d", WatchEventType::KeyUpdated) == Ids{5});
  CHECK(t.quiescent());
}

TEST_CASE("wait table: a key that keeps notifying with nobody waiting is unwatched") {
  WaitTable t(100);
  CHECK(t.add(1, {"/counter"}));
  t.take_batch();
  CHECK(t.on_probe_reply({true}) == Ids{1});
  for (std::uint64_t i = 0; i < WaitTable::kIdleEventsBeforeShedding; ++i)
    t.on_event("/counter", WatchEventType::KeyUpdated);
  CHECK_FALSE(t.unwatch_due());
  t.on_event("/counter", WatchEventType::KeyUpdated);
  CHECK(t.unwatch_due());
  CHECK(t.take_unwatch() == std::vector<std::string>{"/counter"});
  CHECK_FALSE(t.unwatch_due());
  CHECK(t.watched_keys() == 0);
}
