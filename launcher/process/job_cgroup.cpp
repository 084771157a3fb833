// SPDX-License-Identifier: MIT
#include "launcher/process/job_cgroup.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

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

/// Where the cgroup v2 hierarchy is mounted, and ddprun's own cgroup inside it; "" when there
/// is no cgroup v2 mount or ddprun's cgroup is not visible in it.
std::string own_cgroup_dir() {
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
    if (root == "/") return relative == "/" ? mount_point : mount_point + relative;
    if (relative.rfind(root, 0) == 0) return mount_point + relative.substr(root.size());
  }
  return {};
}

std::string random_suffix() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

}  // namespace

bool kill_and_remove_cgroup(const std::string& path, int wait_ms) {
  write_file(path + "/cgroup.kill", "1");
  for (int waited = 0; populated(path) && waited < wait_ms; waited += 5) ::usleep(5'000);
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

std::variant<std::unique_ptr<JobCgroup>, std::string> JobCgroup::create() {
  const std::string parent = own_cgroup_dir();
  if (parent.empty()) return std::string("cgroup v2 is not mounted");
  for (const auto& dead : abandoned_entries(parent)) kill_and_remove_cgroup(dead, 1000);
  const std::string path = fmt::format("{}/{}{}", parent, owned_name_prefix(), random_suffix());
  if (::mkdir(path.c_str(), 0755) != 0) {
    return fmt::format("cannot create a cgroup in {}: {}", parent, std::strerror(errno));
  }
  auto lock = DirectoryLock::acquire(path);
  struct stat st {};
  const bool has_kill = ::stat((path + "/cgroup.kill").c_str(), &st) == 0;
  int procs = has_kill ? ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC) : -1;
  // Moving a process in also needs write access to the common ancestor's cgroup.procs.
  const bool can_move = ::access((parent + "/cgroup.procs").c_str(), W_OK) == 0;
  if (!lock || procs < 0 || !can_move) {
    const std::string why = !has_kill ? "this kernel has no cgroup.kill (Linux 5.14+)"
                            : !lock   ? "cannot lock " + path
                                      : "cannot move processes into " + path;
    if (procs >= 0) ::close(procs);
    lock.reset();
    ::rmdir(path.c_str());
    return why;
  }
  const int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return std::unique_ptr<JobCgroup>(new JobCgroup(path, dir, procs, std::move(lock)));
}

JobCgroup::~JobCgroup() {
  ::close(procs_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  kill_and_remove_cgroup(path_, 1000);
}

bool JobCgroup::kill_all() const { return write_file(path_ + "/cgroup.kill", "1"); }

std::vector<pid_t> JobCgroup::members() const {
  std::vector<pid_t> pids;
  std::ifstream procs(path_ + "/cgroup.procs");
  long pid = 0;
  while (procs >> pid) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(") ");
    // A zombie is dead already; it only waits for its parent.
    if (close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z') {
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
  return pids;
}

}  // namespace ddp::launcher
