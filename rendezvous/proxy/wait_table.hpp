#pragma once

// The store proxy's WAITs, pure bookkeeping (no I/O) so that it can be tested on its own. See
// docs/scale.md ("One root connection per node").
//
// Every WAIT goes on the proxy's one link to the root, in ddprun's tagged mode: G2 WATCH_KEY,
// PROBE and UNWATCH between the workers' writes, and the root's notifications, on one ordered
// connection whose messages are points of the root's history:
//   * a WATCH_KEY sent before a PROBE on the link is registered before the PROBE runs;
//   * a PROBE's reply says which of its keys exist at the PROBE's point;
//   * every notification after that reply is a change made after that point.
// A local WAIT is probed only after it arrived (and behind its caller's own writes, on the same
// link), so a key the PROBE saw, or a KEY_CREATED / KEY_UPDATED notification after its reply,
// shows the key existing at a point after the WAIT arrived. The WAIT is answered once each of
// its keys was seen that way. Queues count as keys (QUEUE_PUSH notifies, PROBE sees a non-empty
// queue), so queue_pop(block=True) waits the same way.
//
// Costs: linear in the keys of a WAIT (hash sets, never a search of a list), and a cancelled or
// answered WAIT leaves nothing behind.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rendezvous/protocol.hpp"

namespace ddp::rdzv::proxy {

class WaitTable {
 public:
  explicit WaitTable(std::size_t max_watched_keys) : max_watched_(max_watched_keys) {}

  // A local WAIT (id unique while it is in the table) on `keys`, ready to be probed. False (and
  // nothing changes) when its keys not yet watched would take the link past max_watched_keys.
  bool add(std::uint64_t id, const std::vector<std::string>& keys);
  // The WAIT will not be answered (CANCEL_WAIT, its worker went away): forgotten entirely.
  void cancel(std::uint64_t id);

  // What to send next: WATCH_KEY for each key not registered yet, then one PROBE of the keys of
  // the WAITs added since the last batch, at most `max_probe_keys` keys (a WAIT is never split:
  // the rest waits for the next batch). Empty when there is nothing to send.
  struct Batch {
    std::vector<std::string> watch;  // WATCH_KEY, in order, before the probe
    std::vector<std::string> probe;  // PROBE keys; empty and !has_probe when nothing to probe
    bool has_probe = false;
    std::size_t waits = 0;  // local WAITs the probe covers
    bool empty() const { return watch.empty() && !has_probe; }
  };
  Batch take_batch(std::size_t max_probe_keys = SIZE_MAX);

  // Messages of the link, in the order they arrived. Each returns the WAITs now answered.
  // The reply to the oldest PROBE not yet answered (exists[i] for its i-th key).
  std::vector<std::uint64_t> on_probe_reply(const std::vector<bool>& exists);
  std::vector<std::uint64_t> on_event(const std::string& key, WatchEventType type);

  std::size_t pending() const { return waits_.size(); }  // WAITs not answered
  std::size_t watched_keys() const { return watched_.size(); }
  std::size_t max_watched_keys() const { return max_watched_; }
  std::size_t probes_outstanding() const { return probes_.size(); }
  // Keys some armed WAIT still waits on (what the table holds per key).
  std::size_t armed_keys() const { return armed_by_key_.size(); }

  // Shedding registrations. Due when more than half the bound is watched and the count grew
  // since the last shedding, or more than kIdleEventsBeforeShedding notifications came for keys
  // nobody waits on since then.
  static constexpr std::uint64_t kIdleEventsBeforeShedding = 1024;
  bool unwatch_due() const;
  // Every watched key no WAIT in the table still needs (to send UNWATCH for, in order after
  // whatever take_batch() returned): forgotten as watched, so a later WAIT on one watches it
  // again. Resets the idle-notification count.
  std::vector<std::string> take_unwatch();
  std::uint64_t idle_events() const { return idle_events_; }
  bool quiescent() const { return waits_.empty() && probes_.empty() && unbatched_.empty(); }

 private:
  struct Wait {
    std::vector<std::string> keys;  // distinct keys
    std::size_t remaining = 0;      // keys not yet seen existing (once armed)
    bool armed = false;             // its PROBE answered: notifications count now
  };

  std::size_t max_watched_;
  std::unordered_set<std::string> watched_;  // WATCH_KEY sent on this link
  std::vector<std::string> to_watch_;        // not sent yet
  std::unordered_map<std::uint64_t, Wait> waits_;
  std::deque<std::uint64_t> unbatched_;              // added, not in a PROBE yet
  std::deque<std::vector<std::uint64_t>> probes_;    // PROBEs out: the WAITs each covers
  std::deque<std::vector<std::string>> probe_keys_;  // and their keys, in request order
  // Armed WAITs by key they still miss.
  std::unordered_map<std::string, std::unordered_set<std::uint64_t>> armed_by_key_;
  std::uint64_t idle_events_ = 0;
  std::uint64_t idle_events_since_shed_ = 0;
  std::size_t watched_after_shed_ = 0;
};

}  // namespace ddp::rdzv::proxy
