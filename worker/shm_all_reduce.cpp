// SPDX-License-Identifier: MIT
#include "ddprun/worker/shm_all_reduce.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
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
void reduce_slots(T* out, const unsigned char* slots, std::size_t slot_bytes, int world,
                  std::size_t count, ShmOp op) {
  const T* first = reinterpret_cast<const T*>(slots);
  for (std::size_t i = 0; i < count; ++i) out[i] = first[i];
  for (int r = 1; r < world; ++r) {
    const T* in = reinterpret_cast<const T*>(slots + static_cast<std::size_t>(r) * slot_bytes);
    switch (op) {
      case ShmOp::Sum:
        for (std::size_t i = 0; i < count; ++i) out[i] += in[i];
        break;
      case ShmOp::Max:  // as Gloo's max: the larger by operator<
        for (std::size_t i = 0; i < count; ++i) out[i] = out[i] < in[i] ? in[i] : out[i];
        break;
      case ShmOp::Min:
        for (std::size_t i = 0; i < count; ++i) out[i] = in[i] < out[i] ? in[i] : out[i];
        break;
    }
  }
}

std::size_t element_size(ShmElement element) { return element == ShmElement::Float32 ? 4 : 8; }

}  // namespace

/// The segment: a header line, one flag line per rank, then one slot per rank.
struct SharedMemoryAllReduce::Layout {
  struct alignas(kLine) Header {
    std::uint64_t magic;
    std::uint32_t world_size;
    std::uint64_t slot_bytes;
  };
  struct alignas(kLine) Flag {
    std::atomic<std::uint64_t> seq;  ///< 2k-1: op k's data is in my slot; 2k: done reading op k.
    std::int32_t pid;
  };
  Header header;  // then world_size Flags, then world_size slots

  static std::size_t flags_offset() { return sizeof(Header); }
  static std::size_t slots_offset(int world) {
    return round_up(flags_offset() + world * sizeof(Flag));
  }
  static std::size_t bytes(int world, std::size_t slot_bytes) {
    return slots_offset(world) + static_cast<std::size_t>(world) * slot_bytes;
  }
  Flag& flag(int r) {
    return reinterpret_cast<Flag*>(reinterpret_cast<unsigned char*>(this) + flags_offset())[r];
  }
  unsigned char* slots() {
    return reinterpret_cast<unsigned char*>(this) +
           slots_offset(static_cast<int>(header.world_size));
  }
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared atomics must be lock free");

namespace {

const std::string kKeyPrefix = "ddprun_shm_all_reduce/";
const std::string kSegmentPrefix = "ddprun-";

/// The pid namespace inode in pid_scope() ("host/<inode>"), as segment names carry it.
std::string pid_namespace() {
  const std::string scope = pid_scope();
  return scope.substr(scope.rfind('/') + 1);
}

}  // namespace

int reclaim_stale_segments() {
  // Names: ddprun-<tag>-<pid namespace>-<pid>-<random>; the tag may itself contain '-'.
  const std::string ns = pid_namespace();
  int removed = 0;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, kSegmentPrefix.size(), kSegmentPrefix) != 0) continue;
    const auto random_dash = name.rfind('-');
    if (random_dash == std::string::npos || random_dash == 0) continue;
    const auto pid_dash = name.rfind('-', random_dash - 1);
    if (pid_dash == std::string::npos || pid_dash == 0) continue;
    const auto ns_dash = name.rfind('-', pid_dash - 1);
    if (ns_dash == std::string::npos) continue;
    if (name.substr(ns_dash + 1, pid_dash - ns_dash - 1) != ns) continue;
    int pid = 0;
    try {
      pid = std::stoi(name.substr(pid_dash + 1, random_dash - pid_dash - 1));
    } catch (const std::exception&) {
      continue;
    }
    if (pid > 0 && process_is_dead(pid) && ::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

int SharedMemoryAllReduce::peer_pid(const Rendezvous& rendezvous, int peer) {
  if (setup_pids_[static_cast<std::size_t>(peer)] >= 0)
    return setup_pids_[static_cast<std::size_t>(peer)];
  const std::string key = kKeyPrefix + "pid/" + std::to_string(peer);
  if (!rendezvous.check(key)) return 0;           // not published yet: ask again on the next check
  const std::string value = rendezvous.get(key);  // "<scope> <pid>"
  const auto space = value.rfind(' ');
  int pid = 0;
  if (space != std::string::npos && value.substr(0, space) == pid_scope()) {
    try {
      pid = std::stoi(value.substr(space + 1));
    } catch (const std::exception&) {
      pid = 0;
    }
  }
  setup_pids_[static_cast<std::size_t>(peer)] = pid;
  return pid;
}

std::string SharedMemoryAllReduce::wait_for_key(const Rendezvous& rendezvous,
                                                const std::string& key, int peer) {
  const auto started = SteadyClock::now();
  auto pause = std::chrono::microseconds(50);
  while (!rendezvous.check(key)) {
    const int pid = peer_pid(rendezvous, peer);
    // A peer may publish the key and end between the check above and this one (rank 0 sets a
    // failed verdict and exits): only a key still missing after its death is a death.
    if (pid > 0 && process_is_dead(pid) && !rendezvous.check(key)) {
      throw PeerDiedError("shared-memory all-reduce setup: rank " + std::to_string(peer) +
                          " (pid " + std::to_string(pid) + ") died");
    }
    if (SteadyClock::now() - started > timeout_) {
      throw PeerDiedError("shared-memory all-reduce setup: timed out after " +
                          std::to_string(timeout_.count()) + " ms waiting for rank " +
                          std::to_string(peer));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return rendezvous.get(key);
}

SharedMemoryAllReduce::SharedMemoryAllReduce(int rank, int world_size, std::size_t slot_bytes,
                                             const std::string& tag,
                                             std::chrono::milliseconds timeout,
                                             const Rendezvous& rendezvous)
    : rank_(rank),
      world_size_(world_size),
      slot_bytes_(round_up(slot_bytes)),
      timeout_(timeout),
      setup_pids_(static_cast<std::size_t>(world_size), -1) {
  mapped_bytes_ = Layout::bytes(world_size_, slot_bytes_);
  // Peers check each other's liveness by pid while they wait for one another's keys.
  rendezvous.set(kKeyPrefix + "pid/" + std::to_string(rank_),
                 pid_scope() + " " + std::to_string(::getpid()));
  // A constructor that throws runs no destructor: unmap here unless setup succeeded.
  struct UnmapUnlessShared {
    SharedMemoryAllReduce& self;
    bool shared = false;
    ~UnmapUnlessShared() {
      if (!shared) self.unmap();
    }
  } unmap_unless_shared{*this};
  const std::string verdict = rank_ == 0 ? host_segment(tag, rendezvous) : join_segment(rendezvous);
  if (verdict != "ok") throw ShmUnavailable("shared-memory all-reduce unavailable: " + verdict);
  unmap_unless_shared.shared = true;
}

void SharedMemoryAllReduce::unmap() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  base_ = nullptr;
  layout_ = nullptr;
}

std::string SharedMemoryAllReduce::map_segment(int fd, const std::string& name) {
  base_ = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    return "mmap(" + name + "): " + errno_text();
  }
  layout_ = static_cast<Layout*>(base_);
  return {};
}

std::string SharedMemoryAllReduce::create_segment(std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    std::string problem = "shm_open(" + name + "): " + errno_text();
    name.clear();  // nothing was created: nothing to unlink, nor to publish
    return problem;
  }
  std::string problem;
  if (::ftruncate(fd, static_cast<off_t>(mapped_bytes_)) != 0) {
    problem = "ftruncate(" + name + "): " + errno_text();
  } else {
    problem = map_segment(fd, name);
  }
  ::close(fd);
  if (problem.empty()) {
    // ftruncate zero-fills: all atomics start at 0; the rest is plain data.
    layout_->header.magic = kMagic;
    layout_->header.world_size = static_cast<std::uint32_t>(world_size_);
    layout_->header.slot_bytes = slot_bytes_;
    layout_->flag(0).pid = static_cast<std::int32_t>(::getpid());
  }
  return problem;
}

std::string SharedMemoryAllReduce::host_segment(const std::string& tag,
                                                const Rendezvous& rendezvous) {
  reclaim_stale_segments();
  // The tag names the job; pid namespace and pid let a later run reclaim it, the random suffix
  // keeps two jobs on one host apart.
  std::random_device random;
  std::string name = "/" + kSegmentPrefix + tag + "-" + pid_namespace() + "-" +
                     std::to_string(::getpid()) + "-" + std::to_string(random() % 1000000);
  // The name stays linked only between creation and the verdict: every path out unlinks it.
  struct UnlinkOnExit {
    std::string& name;
    ~UnlinkOnExit() {
      if (!name.empty()) ::shm_unlink(name.c_str());
    }
  } unlink_on_exit{name};
  const std::string problem = create_segment(name);
  // "!" marks a failure: the others then skip mapping and wait for the verdict.
  rendezvous.set(kKeyPrefix + "name", problem.empty() ? name : "!" + problem);
  std::string verdict = problem.empty() ? "ok" : "rank 0: " + problem;
  for (int peer = 1; peer < world_size_; ++peer) {
    const std::string status =
        wait_for_key(rendezvous, kKeyPrefix + "mapped/" + std::to_string(peer), peer);
    if (status != "ok" && verdict == "ok") verdict = "rank " + std::to_string(peer) + ": " + status;
  }
  if (!name.empty()) ::shm_unlink(name.c_str());  // every rank has reported: nothing stays behind
  name.clear();
  rendezvous.set(kKeyPrefix + "verdict", verdict);
  return verdict;
}

std::string SharedMemoryAllReduce::attach_segment(const std::string& published) {
  if (published.empty() || published[0] == '!') return "rank 0 created no segment";
  const int fd = ::shm_open(published.c_str(), O_RDWR, 0600);
  if (fd < 0) return "shm_open(" + published + "): " + errno_text() + " (not on rank 0's host?)";
  std::string problem;
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) < mapped_bytes_) {
    problem = "segment " + published + " is smaller than expected";
  } else {
    problem = map_segment(fd, published);
  }
  ::close(fd);
  if (problem.empty() && (layout_->header.magic != kMagic ||
                          layout_->header.world_size != static_cast<std::uint32_t>(world_size_))) {
    problem = "segment " + published + " does not match this job";
  }
  if (problem.empty()) layout_->flag(rank_).pid = static_cast<std::int32_t>(::getpid());
  return problem;
}

std::string SharedMemoryAllReduce::join_segment(const Rendezvous& rendezvous) {
  const std::string problem = attach_segment(wait_for_key(rendezvous, kKeyPrefix + "name", 0));
  rendezvous.set(kKeyPrefix + "mapped/" + std::to_string(rank_), problem.empty() ? "ok" : problem);
  return wait_for_key(rendezvous, kKeyPrefix + "verdict", 0);
}

SharedMemoryAllReduce::~SharedMemoryAllReduce() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
}

void SharedMemoryAllReduce::check_peer(int peer, std::uint64_t target,
                                       SteadyClock::time_point started) const {
  const int pid = layout_->flag(peer).pid;
  // The counter is read again after the death is seen: a peer that arrived and then ended
  // (its last op done, the job over for it) is not a death.
  if (pid > 0 && process_is_dead(pid) &&
      layout_->flag(peer).seq.load(std::memory_order_acquire) < target) {
    throw PeerDiedError("shared-memory all-reduce: rank " + std::to_string(peer) + " (pid " +
                        std::to_string(pid) + ") died; Connection closed by peer");
  }
  if (SteadyClock::now() - started > timeout_) {
    throw PeerDiedError("shared-memory all-reduce: timed out after " +
                        std::to_string(timeout_.count()) + " ms waiting for rank " +
                        std::to_string(peer));
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
        check_peer(peer, target, started);
        next_check = now + std::chrono::milliseconds(5);
      }
    }
  }
}

void SharedMemoryAllReduce::all_reduce(void* data, std::size_t count, ShmElement element,
                                       ShmOp op) {
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
      reduce_slots(static_cast<float*>(data), slots, slot_bytes_, world_size_, count, op);
      break;
    case ShmElement::Float64:
      reduce_slots(static_cast<double*>(data), slots, slot_bytes_, world_size_, count, op);
      break;
    case ShmElement::Int64:
      reduce_slots(static_cast<std::int64_t*>(data), slots, slot_bytes_, world_size_, count, op);
      break;
  }
  layout_->flag(rank_).seq.store(2 * k, std::memory_order_release);
}

}  // namespace ddp::worker
