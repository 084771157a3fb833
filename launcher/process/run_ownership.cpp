// SPDX-License-Identifier: MIT
#include "launcher/process/run_ownership.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

namespace ddp::launcher {
namespace {

constexpr std::string_view kPrefix = "ddprun-";

/// True when nobody holds the directory's lock (we take and drop it to find out).
bool unlocked(int parent_fd, const char* name) {
  int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);  // releases the lock we may have taken
  return free;
}

}  // namespace

std::unique_ptr<DirectoryLock> DirectoryLock::acquire(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return nullptr;
  // Blocking: a reclaimer that checks this directory holds the lock for a moment only.
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd);
      return nullptr;
    }
  }
  return std::unique_ptr<DirectoryLock>(new DirectoryLock(fd));
}

DirectoryLock::~DirectoryLock() { ::close(fd_); }

std::string owned_name_prefix() { return std::string(kPrefix) + std::to_string(::getpid()) + "-"; }

std::optional<pid_t> owner_pid_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size();
  long pid = 0;
  auto [rest, ec] = std::from_chars(begin, end, pid);
  if (ec != std::errc() || rest == begin || rest == end || *rest != '-' || rest + 1 == end ||
      pid <= 1) {
    return std::nullopt;
  }
  return static_cast<pid_t>(pid);
}

std::vector<std::string> abandoned_entries(const std::string& parent) {
  std::vector<std::string> out;
  int parent_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd < 0) return out;
  DIR* dir = ::fdopendir(parent_fd);
  if (!dir) {
    ::close(parent_fd);
    return out;
  }
  const uid_t me = ::geteuid();
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    auto pid = owner_pid_of(name);
    if (!pid) continue;
    struct stat st {};
    if (::fstatat(parent_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != me) {
      continue;
    }
    const bool owner_alive = ::kill(*pid, 0) == 0 || errno == EPERM;
    if (owner_alive || !unlocked(parent_fd, entry->d_name)) continue;
    out.emplace_back(parent).append("/").append(name);
  }
  ::closedir(dir);  // closes parent_fd
  return out;
}

}  // namespace ddp::launcher
