#pragma once

// The store proxy's multiplexed WAITs: the bookkeeping of the watch link, pure (no I/O), so that
// it can be tested on its own. See docs/scale.md ("WAITs on one watch link").
//
// The link is the main link in tagged mode (G2 WATCH_KEY / PROBE / UNWATCH between the writes,
// every message from the root tagged: docs/scale.md "One root connection per node") or, with a
// root that refuses tagged mode, the watch link described here. The same argument holds for
// both: one ordered connection whose messages are points of the root's history.
//
// The watch link is one G1 connection to the root (ddprun-store). On it the proxy sends only
// WATCH_KEY (reply KEY_CALLBACK_REGISTERED, 0x03) and PROBE (ddprun extension, reply
// kProbeReplyTag then one existence byte per key); the root adds notifications (first byte
// 0, 1 or 2) for every change of a watched key. The root serves one connection in order, so the
// stream is one sequence of points of the root's history:
//   * a WATCH_KEY sent before a PROBE on the link is registered before the PROBE runs;
//   * a PROBE's reply says which of its keys exist at the PROBE's point;
//   * every notification after that reply is a change made after that point.
// A local WAIT is probed only after it arrived (and after its caller's own writes were applied),
// so a key the PROBE saw, or a KEY_CREATED / KEY_UPDATED notification after its reply, shows the
// key existing at a point after the WAIT arrived. The WAIT is answered once each of its keys was
// seen that way.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rendezvous/protocol.hpp"

namespace ddp::rdzv::proxy {

class WaitTable {
 public:
  explicit WaitTable(std::size_t max_watched_keys) : max_watched_(max_watched_keys) {}

  // A local WAIT (id unique while it is in the table) on `keys`, ready to be probed. False (and
  // nothing changes) when its keys not yet watched would take the link past max_watched_keys:
  // the caller serves that WAIT another way.
  bool add(std::uint64_t id, const std::vector<std::string>& keys);
  // The WAIT will not be answered (CANCEL_WAIT, its worker went away).
  void cancel(std::uint64_t id);

  // What to send next: WATCH_KEY for each key not registered yet, then one PROBE of every key
  // of the WAITs added since the last batch. Empty when there is nothing to send.
  struct Batch {
    std::vector<std::string> watch;  // WATCH_KEY, in order, before the probe
    std::vector<std::string> probe;  // PROBE keys; empty and !has_probe when nothing to probe
    bool has_probe = false;
    std::size_t waits = 0;  // local WAITs the probe covers
  };
  Batch take_batch();

  // Messages of the link, in the order they arrived. Each returns the WAITs now answered.
  // The reply to the oldest PROBE not yet answered (exists[i] for its i-th key).
  std::vector<std::uint64_t> on_probe_reply(const std::vector<bool>& exists);
  std::vector<std::uint64_t> on_event(const std::string& key, WatchEventType type);

  std::size_t pending() const { return waits_.size(); }  // WAITs not answered
  std::size_t watched_keys() const { return watched_.size(); }
  std::size_t max_watched_keys() const { return max_watched_; }
  std::size_t probes_outstanding() const { return probes_.size(); }

  // Shedding registrations (a link whose root can UNWATCH: the tagged main link). Due when more
  // than half the bound is watched and the count grew since the last shedding, or more than
  // kIdleEventsBeforeShedding notifications came for keys nobody waits on since then.
  static constexpr std::uint64_t kIdleEventsBeforeShedding = 1024;
  bool unwatch_due() const;
  // Every watched key no WAIT in the table still needs (to send UNWATCH for, in order after
  // whatever take_batch() returned): forgotten as watched, so a later WAIT on one watches it
  // again. Resets the idle-notification count.
  std::vector<std::string> take_unwatch();
  // Notifications for keys no WAIT was waiting on, since the table was made: what watching
  // keys nobody waits on any more costs (the root cannot unwatch; closing the link does).
  std::uint64_t idle_events() const { return idle_events_; }
  // Every WAIT answered and no PROBE out: the link may be closed without losing anything.
  bool quiescent() const { return waits_.empty() && probes_.empty() && unbatched_.empty(); }

 private:
  struct Wait {
    std::vector<std::string> missing;  // keys not yet seen existing (deduplicated)
    bool armed = false;                // its PROBE answered: notifications count now
  };
  std::vector<std::uint64_t> settle(const std::string& key, std::vector<std::uint64_t>& out);

  std::size_t max_watched_;
  std::unordered_set<std::string> watched_;  // WATCH_KEY sent on this link
  std::vector<std::string> to_watch_;        // not sent yet
  std::unordered_map<std::uint64_t, Wait> waits_;
  std::vector<std::uint64_t> unbatched_;             // added, not in a PROBE yet
  std::deque<std::vector<std::uint64_t>> probes_;    // PROBEs out: the WAITs each covers
  std::deque<std::vector<std::string>> probe_keys_;  // and their keys, in request order
  // Armed WAITs by missing key (answered ones are skipped lazily).
  std::unordered_map<std::string, std::vector<std::uint64_t>> armed_by_key_;
  std::uint64_t idle_events_ = 0;
  std::uint64_t idle_events_since_shed_ = 0;
  std::size_t watched_after_shed_ = 0;
};

// One message of the watch link, parsed. `expect_probe_keys`: the key count of the oldest PROBE
// not answered (a reply tag is an error without one). nullopt while incomplete; throws
// std::runtime_error on bytes no ddprun-store would send and std::length_error past max_bytes.
struct WatchMessage {
  enum class Kind { Registered, ProbeReply, Event } kind = Kind::Registered;
  std::size_t size = 0;  // bytes consumed
  WatchEventType type = WatchEventType::KeyUpdated;
  std::string key;
  std::vector<bool> exists;
};
std::optional<WatchMessage> parse_watch_message(std::string_view buf,
                                                std::optional<std::size_t> expect_probe_keys,
                                                std::size_t max_bytes);

}  // namespace ddp::rdzv::proxy
