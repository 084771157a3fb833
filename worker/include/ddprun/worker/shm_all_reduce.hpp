// SPDX-License-Identifier: MIT
#pragma once
/// A POSIX shared-memory all-reduce for small buffers when every rank of the job runs on this
/// host. A small Gloo all-reduce over loopback TCP costs about a millisecond here; through a
/// shared segment it is a copy, a flag per rank and a sum. No LibTorch: the caller hands raw
/// buffers, so this file is usable (and testable) without c10d.
///
/// Protocol (op k = 1, 2, ...; one 64-byte flag word per rank):
///   wait until every flag >= 2(k-1)   (everyone finished reading op k-1 from the slots)
///   copy my buffer into my slot; flag[me] = 2k-1
///   wait until every flag >= 2k-1     (every rank's data is in place)
///   buffer = slot[0] + slot[1] + ...  (fixed rank order: bit-identical on every rank)
///   flag[me] = 2k
/// Waiting spins briefly, then yields, then sleeps in short slices; every few milliseconds it
/// checks the peers it waits for (pid gone or a zombie: PeerDiedError at once) and the timeout.
///
/// Setup is collective and agreed through the store: every rank publishes its pid, rank 0
/// creates the segment, every other rank reports whether it could map it, rank 0 unlinks the
/// name and publishes the verdict. A rank that cannot map it (another host, /dev/shm full) makes
/// every rank throw ShmUnavailable with the same reason, so all fall back to the process group
/// together; every wait checks the liveness of the rank it waits for.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddprun/worker/process_liveness.hpp"

namespace ddp::worker {

/// A peer died or the wait exceeded the timeout: the collective cannot complete.
class PeerDiedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Not every rank could share the segment; every rank throws it with the same reason.
class ShmUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ShmElement { Float32, Float64, Int64 };
enum class ShmOp { Sum, Max, Min };

class SharedMemoryAllReduce {
 public:
  /// How ranks agree on the segment: rank 0 publishes its name, the others read it (blocking,
  /// bounded by the store's own timeout). The communicator passes its c10d store here.
  struct Rendezvous {
    std::function<void(const std::string& key, const std::string& value)> set;
    std::function<std::string(const std::string& key)> get;
    /// Whether `key` has been set (does not block).
    std::function<bool(const std::string& key)> check;
  };

  /// Collective: rank 0 creates the segment (slot_bytes per rank), the others map it; rank 0
  /// unlinks the name once every rank has reported, so nothing stays in /dev/shm afterwards
  /// (and before creating, rank 0 removes segments whose creator was killed:
  /// reclaim_stale_segments). `tag` names the segment readably (the job's run id, restart count,
  /// port). Throws ShmUnavailable (on every rank) when some rank cannot map it, PeerDiedError when
  /// a rank it waits for died or the timeout passed.
  SharedMemoryAllReduce(int rank, int world_size, std::size_t slot_bytes, const std::string& tag,
                        std::chrono::milliseconds timeout, const Rendezvous& rendezvous);
  ~SharedMemoryAllReduce();
  SharedMemoryAllReduce(const SharedMemoryAllReduce&) = delete;
  SharedMemoryAllReduce& operator=(const SharedMemoryAllReduce&) = delete;

  /// Largest buffer (bytes) all_reduce_sum accepts.
  std::size_t capacity() const { return slot_bytes_; }
  /// In-place reduction over all ranks of `count` elements at `data`, in rank order 0..N-1
  /// (bit-identical on every rank). Collective, in the same order on every rank. Throws
  /// PeerDiedError when a peer it waits for died or the timeout passed.
  void all_reduce(void* data, std::size_t count, ShmElement element, ShmOp op);
  void all_reduce_sum(void* data, std::size_t count, ShmElement element) {
    all_reduce(data, count, element, ShmOp::Sum);
  }

 private:
  struct Layout;
  /// Rank 0: creates, maps and initialises the segment, publishes its name, collects every
  /// rank's report and publishes the verdict ("ok" or the first problem), which it returns.
  std::string host_segment(const std::string& tag, const Rendezvous& rendezvous);
  /// Other ranks: map the published segment, report, and return rank 0's verdict.
  std::string join_segment(const Rendezvous& rendezvous);
  /// shm_open + ftruncate + mmap of a new segment `name`; the problem ("" when none). `name`
  /// is cleared when nothing was created.
  std::string create_segment(std::string& name);
  /// Maps the segment rank 0 published and checks it is this job's; the problem ("" when none).
  std::string attach_segment(const std::string& published);
  /// Maps `fd` (`name` for the message); the problem ("" when none).
  std::string map_segment(int fd, const std::string& name);
  void unmap();
  void wait_for_all(std::uint64_t target);
  void check_peer(int peer, std::uint64_t target,
                  std::chrono::steady_clock::time_point started) const;
  /// Blocks until `key` is set, checking that `peer` (who sets it) lives, bounded by the timeout.
  std::string wait_for_key(const Rendezvous& rendezvous, const std::string& key, int peer);
  /// The pid of `peer` when it shares this process's pid scope (else 0: not checkable here).
  int peer_pid(const Rendezvous& rendezvous, int peer);

  int rank_;
  int world_size_;
  std::size_t slot_bytes_;
  std::chrono::milliseconds timeout_;
  std::uint64_t op_ = 0;
  std::size_t mapped_bytes_ = 0;
  void* base_ = nullptr;
  Layout* layout_ = nullptr;
  std::vector<int> setup_pids_;  ///< Peers' pids learnt during setup (-1: not yet known).
};

/// Unlinks /dev/shm segments of this module whose creator (same pid namespace) no longer runs:
/// what a rank 0 killed during setup left. Returns how many it removed.
int reclaim_stale_segments();

}  // namespace ddp::worker
