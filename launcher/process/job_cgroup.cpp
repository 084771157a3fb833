// SPDX-License-Identifier: MIT
#include "launcher/process/job_cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "launcher/process/process_table.hpp"

namespace ddp::launcher {
namespace {

bool write_file(const std::string& path, const char* text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t size = std::strlen(text);
  const bool ok = ::write(fd, text, size) == static_cast<ssize_t>(size);
  ::close(fd);
  return ok;
}

bool populated(const std::string& path) {
  std::ifstream events(path + "/cgroup.events");
  std::string key;
  int value = 0;
  while (events >> key >> value) {
    if (key == "populated") return value != 0;
  }
  return false;  // gone or unreadable: nothing we can wait for
}

/// ddprun's own cgroup v2 directory, and its name as /proc/PID/cgroup gives it; "" when there is
/// no cgroup v2 mount or ddprun's cgroup is not visible in it.
struct OwnCgroup {
  std::string dir;
  std::string relative;
};

OwnCgroup own_cgroup() {
  std::string relative;
  {
    std::ifstream self("/proc/self/cgroup");
    std::string line;
    while (std::getline(self, line)) {
      if (line.rfind("0::", 0) == 0) relative = line.substr(3);
    }
  }
  if (relative.empty()) return {};
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) {
    // "<id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <fstype> <src>
    // <super>"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mount_point;
    head >> id >> parent >> dev >> root >> mount_point;
    if (root == "/") return {relative == "/" ? mount_point : mount_point + relative, relative};
    if (relative.rfind(root, 0) == 0) return {mount_point + relative.substr(root.size()), relative};
  }
  return {};
}

/// The cgroups inside `path` (not `path` itself), children before their parents; a worker may
/// have made them. Bounded in depth (the kernel bounds it too: cgroup.max.depth).
void nested_cgroups(const std::string& path, std::vector<std::string>& out, int depth = 0) {
  if (depth > 64) return;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return;
  std::vector<std::string> children;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_type != DT_DIR || entry->d_name[0] == '.') continue;
    children.push_back(path + "/" + entry->d_name);
  }
  ::closedir(dir);
  for (const auto& child : children) {
    nested_cgroups(child, out, depth + 1);
    out.push_back(child);
  }
}

void read_members(const std::string& path, std::vector<pid_t>& pids) {
  std::ifstream procs(path + "/cgroup.procs");
  long pid = 0;
  while (procs >> pid) {
    ProcStat stat;
    // A zombie is dead already; it only waits for its parent.
    if (read_proc_stat(static_cast<pid_t>(pid), stat) && stat.state != 'Z') {
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
}

std::string random_suffix() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

}  // namespace

bool kill_and_remove_cgroup(const std::string& path, int wait_ms) {
  write_file(path + "/cgroup.kill", "1");
  for (int waited = 0; populated(path) && waited < wait_ms; waited += 5) ::usleep(5'000);
  // rmdir of a cgroup with cgroups inside fails (EBUSY): the deepest go first.
  std::vector<std::string> nested;
  nested_cgroups(path, nested);
  for (const auto& dir : nested) ::rmdir(dir.c_str());
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

std::variant<std::unique_ptr<JobCgroup>, std::string> JobCgroup::create() {
  const OwnCgroup own = own_cgroup();
  const std::string& parent = own.dir;
  if (parent.empty()) return std::string("cgroup v2 is not mounted");
  for (const auto& dead : abandoned_entries(parent)) kill_and_remove_cgroup(dead, 1000);
  const std::string name = owned_name_prefix() + random_suffix();
  const std::string path = parent + "/" + name;
  if (::mkdir(path.c_str(), 0755) != 0) {
    return fmt::format("cannot create a cgroup in {}: {}", parent, std::strerror(errno));
  }
  auto lock = DirectoryLock::acquire(path);
  struct stat st {};
  const bool has_kill = ::stat((path + "/cgroup.kill").c_str(), &st) == 0;
  // Moving a process in also needs write access to the common ancestor's cgroup.procs.
  const bool can_move = ::access((parent + "/cgroup.procs").c_str(), W_OK) == 0;
  const std::string relative = own.relative == "/" ? "/" + name : own.relative + "/" + name;
  if (has_kill && lock && can_move) {
    std::unique_ptr<JobCgroup> made(new JobCgroup(path, relative, std::move(lock)));
    if (made->open_attempt()) return made;
    return "cannot create a cgroup in " + path;  // `made` removes what it made
  }
  const std::string why = !has_kill ? "this kernel has no cgroup.kill (Linux 5.14+)"
                          : !lock   ? "cannot lock " + path
                                    : "cannot move processes into " + path;
  lock.reset();
  ::rmdir(path.c_str());
  return why;
}

JobCgroup::~JobCgroup() {
  close_attempt();
  kill_and_remove_cgroup(path_, 1000);
}

bool JobCgroup::open_attempt() {
  if (procs_fd_ >= 0) return true;
  const std::string path = fmt::format("{}/attempt-{}", path_, attempts_);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return false;
  attempt_path_ = path;
  procs_fd_ = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  dir_fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return procs_fd_ >= 0 && dir_fd_ >= 0;
}

void JobCgroup::close_attempt() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  procs_fd_ = dir_fd_ = -1;
}

int JobCgroup::dir_fd() { return open_attempt() ? dir_fd_ : -1; }

int JobCgroup::procs_fd() { return open_attempt() ? procs_fd_ : -1; }

void JobCgroup::next_attempt() {
  if (attempt_path_.empty()) return;
  close_attempt();
  // Normally empty already (the Agent waited for every leftover); a process stuck in the kernel
  // keeps its cgroup until the run's cgroup goes.
  kill_and_remove_cgroup(attempt_path_, 0);
  attempt_path_.clear();
  ++attempts_;
}

bool JobCgroup::adopt(pid_t pid, const std::string& name) {
  const std::string path = fmt::format("{}/{}", path_, name);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return false;
  return write_file(path + "/cgroup.procs", std::to_string(pid).c_str());
}

bool JobCgroup::kill_all() const { return write_file(path_ + "/cgroup.kill", "1"); }

std::vector<pid_t> JobCgroup::members() const {
  std::vector<pid_t> pids;
  std::vector<std::string> nested;
  nested_cgroups(path_, nested);
  for (const auto& dir : nested) read_members(dir, pids);
  read_members(path_, pids);
  return pids;
}

bool JobCgroup::contains(pid_t pid) const {
  std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string where = line.substr(3);
    return where == relative_ || where.rfind(relative_ + "/", 0) == 0;
  }
  return false;
}

}  // namespace ddp::launcher
