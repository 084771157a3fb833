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

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace ddp::worker {

/// A peer died or the wait exceeded the timeout: the collective cannot complete.
class PeerDiedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ShmElement { Float32, Float64, Int64 };

class SharedMemoryAllReduce {
 public:
  /// How ranks agree on the segment: rank 0 publishes its name, the others read it (blocking,
  /// bounded by the store's own timeout). The communicator passes its c10d store here.
  struct Rendezvous {
    std::function<void(const std::string& key, const std::string& value)> set;
    std::function<std::string(const std::string& key)> get;
  };

  /// Collective: rank 0 creates the segment (slot_bytes per rank), the others map it; rank 0
  /// unlinks the name once every rank has mapped it, so nothing stays in /dev/shm afterwards.
  /// `tag` names the segment readably (the job's run id, restart count, port).
  SharedMemoryAllReduce(int rank, int world_size, std::size_t slot_bytes, const std::string& tag,
                        std::chrono::milliseconds timeout, const Rendezvous& rendezvous);
  ~SharedMemoryAllReduce();
  SharedMemoryAllReduce(const SharedMemoryAllReduce&) = delete;
  SharedMemoryAllReduce& operator=(const SharedMemoryAllReduce&) = delete;

  /// Largest buffer (bytes) all_reduce_sum accepts.
  std::size_t capacity() const { return slot_bytes_; }
  /// In-place sum over all ranks of `count` elements at `data`. Collective, in the same order on
  /// every rank. Throws PeerDiedError when a peer it waits for died or the timeout passed.
  void all_reduce_sum(void* data, std::size_t count, ShmElement element);

 private:
  struct Layout;
  void wait_for_all(std::uint64_t target);
  void check_peer(int peer, std::chrono::steady_clock::time_point started) const;

  int rank_;
  int world_size_;
  std::size_t slot_bytes_;
  std::chrono::milliseconds timeout_;
  std::uint64_t op_ = 0;
  std::size_t mapped_bytes_ = 0;
  void* base_ = nullptr;
  Layout* layout_ = nullptr;
};

/// Whether a process is gone for good (no such pid, or a zombie nobody has reaped yet).
bool process_is_dead(int pid);

}  // namespace ddp::worker
