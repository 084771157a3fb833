// SPDX-License-Identifier: MIT
#include "worker/shm_all_reduce.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <thread>

namespace ddp::worker {

namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr std::uint64_t kMagic = 0x64647072756e5348ULL;  // "ddprunSH"
constexpr std::size_t kLine = 64;

std::size_t round_up(std::size_t n) { return (n + kLine - 1) / kLine * kLine; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

std::string errno_text() { return std::strerror(errno); }

template <typename T>
void sum_slots(T* out, const unsigned char* slots, std::size_t slot_bytes, int world,
               std::size_t count) {
  const T* first = reinterpret_cast<const T*>(slots);
  for (std::size_t i = 0; i < count; ++i) out[i] = first[i];
  for (int r = 1; r < world; ++r) {
    const T* in = reinterpret_cast<const T*>(slots + static_cast<std::size_t>(r) * slot_bytes);
    for (std::size_t i = 0; i < count; ++i) out[i] += in[i];
  }
}

std::size_t element_size(ShmElement element) {
  return element == ShmElement::Float32 ? 4 : 8;
}

}  // namespace

/// The segment: a header line, one flag line per rank, then one slot per rank.
struct SharedMemoryAllReduce::Layout {
  struct alignas(kLine) Header {
    std::uint64_t magic;
    std::uint32_t world_size;
    std::uint64_t slot_bytes;
    std::atomic<std::uint32_t> attached;  ///< Ranks that mapped the segment (rank 0 unlinks at world).
  };
  struct alignas(kLine) Flag {
    std::atomic<std::uint64_t> seq;  ///< 2k-1: op k's data is in my slot; 2k: done reading op k.
    std::int32_t pid;
  };
  Header header;  // then world_size Flags, then world_size slots

  static std::size_t flags_offset() { return sizeof(Header); }
  static std::size_t slots_offset(int world) { return round_up(flags_offset() + world * sizeof(Flag)); }
  static std::size_t bytes(int world, std::size_t slot_bytes) {
    return slots_offset(world) + static_cast<std::size_t>(world) * slot_bytes;
  }
  Flag& flag(int r) {
    return reinterpret_cast<Flag*>(reinterpret_cast<unsigned char*>(this) + flags_offset())[r];
  }
  unsigned char* slots() {
    return reinterpret_cast<unsigned char*>(this) + slots_offset(static_cast<int>(header.world_size));
  }
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared atomics must be lock free");

bool process_is_dead(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A killed child stays a zombie until its parent reaps it; it will never write its flag.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

SharedMemoryAllReduce::SharedMemoryAllReduce(int rank, int world_size, std::size_t slot_bytes,
                                             const std::string& tag,
                                             std::chrono::milliseconds timeout,
                                             const Rendezvous& rendezvous)
    : rank_(rank), world_size_(world_size), slot_bytes_(round_up(slot_bytes)), timeout_(timeout) {
  mapped_bytes_ = Layout::bytes(world_size_, slot_bytes_);
  std::string name;
  int fd = -1;
  if (rank_ == 0) {
    // The tag names the job; pid and a random suffix keep two jobs on one host apart.
    std::random_device random;
    name = "/ddprun-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(random() % 1000000);
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("shm_open(" + name + "): " + errno_text());
    if (::ftruncate(fd, static_cast<off_t>(mapped_bytes_)) != 0) {
      const auto why = errno_text();
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw std::runtime_error("ftruncate(" + name + "): " + why);
    }
  }
  // Rank 0 publishes the name only once the segment has its size; the others block on the key.
  if (rank_ == 0) {
    rendezvous.set("ddprun_shm_all_reduce/name", name);
  } else {
    name = rendezvous.get("ddprun_shm_all_reduce/name");
    fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      throw std::runtime_error("shm_open(" + name + ") by rank " + std::to_string(rank_) + ": " +
                               errno_text() + " (are all ranks on one host? --no-shm / DDPRUN_NO_SHM=1 disables this path)");
    }
  }
  base_ = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    if (rank_ == 0) ::shm_unlink(name.c_str());
    throw std::runtime_error("mmap(" + name + "): " + errno_text());
  }
  layout_ = static_cast<Layout*>(base_);
  if (rank_ == 0) {
    // ftruncate zero-fills: all atomics start at 0; the rest is plain data.
    layout_->header.magic = kMagic;
    layout_->header.world_size = static_cast<std::uint32_t>(world_size_);
    layout_->header.slot_bytes = slot_bytes_;
    rendezvous.set("ddprun_shm_all_reduce/ready", "1");
  } else {
    (void)rendezvous.get("ddprun_shm_all_reduce/ready");
    if (layout_->header.magic != kMagic ||
        layout_->header.world_size != static_cast<std::uint32_t>(world_size_)) {
      throw std::runtime_error("shared-memory segment " + name + " does not match this job");
    }
  }
  layout_->flag(rank_).pid = static_cast<std::int32_t>(::getpid());
  layout_->header.attached.fetch_add(1, std::memory_order_acq_rel);
  if (rank_ == 0) {
    // Unlink as soon as every rank has mapped it: from then on a crash leaves nothing behind.
    const auto deadline = SteadyClock::now() + timeout_;
    while (layout_->header.attached.load(std::memory_order_acquire) <
           static_cast<std::uint32_t>(world_size_)) {
      if (SteadyClock::now() > deadline) {
        ::shm_unlink(name.c_str());
        throw PeerDiedError("shared-memory all-reduce: not every rank mapped " + name + " within the timeout");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ::shm_unlink(name.c_str());
  }
}

SharedMemoryAllReduce::~SharedMemoryAllReduce() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
}

void SharedMemoryAllReduce::check_peer(int peer, SteadyClock::time_point started) const {
  const int pid = layout_->flag(peer).pid;
  if (pid > 0 && process_is_dead(pid)) {
    throw PeerDiedError("shared-memory all-reduce: rank " + std::to_string(peer) + " (pid " +
                        std::to_string(pid) + ") died; Connection closed by peer");
  }
  if (SteadyClock::now() - started > timeout_) {
    throw PeerDiedError("shared-memory all-reduce: timed out after " +
                        std::to_string(timeout_.count()) + " ms waiting for rank " + std::to_string(peer));
  }
}

void SharedMemoryAllReduce::wait_for_all(std::uint64_t target) {
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    auto& seq = layout_->flag(peer).seq;
    // Peers usually arrive within microseconds to a millisecond: spin a little, then yield
    // the core (2 ranks may share 2 cores with other threads), then sleep in short slices.
    bool ready = false;
    for (int i = 0; i < 2000 && !ready; ++i) {
      ready = seq.load(std::memory_order_acquire) >= target;
      if (!ready) cpu_relax();
    }
    if (ready) continue;
    const auto started = SteadyClock::now();
    auto next_check = started + std::chrono::milliseconds(5);
    while (seq.load(std::memory_order_acquire) < target) {
      const auto now = SteadyClock::now();
      if (now - started < std::chrono::milliseconds(2)) {
        ::sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (now >= next_check) {
        check_peer(peer, started);
        next_check = now + std::chrono::milliseconds(5);
      }
    }
  }
}

void SharedMemoryAllReduce::all_reduce_sum(void* data, std::size_t count, ShmElement element) {
  const std::size_t bytes = count * element_size(element);
  if (bytes > slot_bytes_) {
    throw std::invalid_argument("shared-memory all-reduce: " + std::to_string(bytes) +
                                " bytes exceed the slot of " + std::to_string(slot_bytes_));
  }
  const std::uint64_t k = ++op_;
  wait_for_all(2 * (k - 1));  // every rank finished reading op k-1: my slot is free
  unsigned char* slots = layout_->slots();
  std::memcpy(slots + static_cast<std::size_t>(rank_) * slot_bytes_, data, bytes);
  layout_->flag(rank_).seq.store(2 * k - 1, std::memory_order_release);
  wait_for_all(2 * k - 1);
  switch (element) {
    case ShmElement::Float32:
      sum_slots(static_cast<float*>(data), slots, slot_bytes_, world_size_, count);
      break;
    case ShmElement::Float64:
      sum_slots(static_cast<double*>(data), slots, slot_bytes_, world_size_, count);
      break;
    case ShmElement::Int64:
      sum_slots(static_cast<std::int64_t*>(data), slots, slot_bytes_, world_size_, count);
      break;
  }
  layout_->flag(rank_).seq.store(2 * k, std::memory_order_release);
}

}  // namespace ddp::worker
