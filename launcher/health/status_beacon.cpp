// SPDX-License-Identifier: MIT
#include "launcher/health/status_beacon.hpp"

#include "launcher/common/proc_stat.hpp"
#include "rendezvous/json_text.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ddp::launcher::health {

namespace {

// This user's own directory, 0700 (made when missing): "" when `dir` is one, else why not. A
// directory anyone else owns (squatted before this user's first job), one others may write,
// or a link is not used.
std::string refusal(const std::string& dir) {
  ::mkdir(dir.c_str(), 0700);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return fmt::format("{}: {}", dir, std::strerror(errno));
  if (S_ISLNK(st.st_mode)) return fmt::format("{} is a symbolic link", dir);
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", dir);
  if (st.st_uid != ::getuid()) {
    return fmt::format("{} belongs to uid {}, not to this user (uid {})", dir, st.st_uid,
                       ::getuid());
  }
  if ((st.st_mode & 0077) != 0) {
    return fmt::format("{} has mode {:04o}, not 0700 (other users may use it)", dir,
                       st.st_mode & 07777);
  }
  return {};
}

std::string current_dir() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

bool alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

}  // namespace

std::optional<unsigned long long> proc_start_time(const std::string& stat) {
  ProcStat parsed;
  return parse_proc_stat(stat.c_str(), parsed) ? parsed.start_time : std::nullopt;
}

std::optional<unsigned long long> process_start_time(pid_t pid) {
  ProcStat stat;
  return read_proc_stat(pid, stat) ? stat.start_time : std::nullopt;
}

std::string status_beacon_dir(std::string* refused) {
  std::string why;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) {
    std::string dir = std::string(xdg) + "/ddprun";
    why = refusal(dir);
    if (why.empty()) return dir;
  }
  std::string dir = fmt::format("/tmp/ddprun-{}", ::getuid());
  const std::string tmp_why = refusal(dir);
  if (tmp_why.empty()) return dir;
  if (refused) *refused = why.empty() ? tmp_why : why + "; " + tmp_why;
  return {};
}

std::unique_ptr<StatusBeacon> StatusBeacon::write(const std::string& dir,
                                                  const std::string& address, int port,
                                                  const std::string& host,
                                                  const std::string& socket) {
  if (dir.empty() || (port <= 0 && socket.empty())) return nullptr;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json j{{"pid", ::getpid()},  {"cwd", current_dir()},
                   {"address", address}, {"port", port},
                   {"host", host},       {"started", std::chrono::duration<double>(now).count()}};
  if (!socket.empty()) j["socket"] = socket;
  if (auto start = process_start_time(::getpid())) j["proc_start"] = *start;
  const std::string path = fmt::format("{}/status-{}.json", dir, ::getpid());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << dump_json(j) << '\n';
    if (!out.flush()) {
      ::unlink(tmp.c_str());
      return nullptr;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return nullptr;
  }
  return std::unique_ptr<StatusBeacon>(new StatusBeacon(path));
}

StatusBeacon::~StatusBeacon() { ::unlink(path_.c_str()); }

std::optional<BeaconEntry> parse_beacon(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    BeaconEntry e;
    e.pid = j.at("pid").get<pid_t>();
    e.cwd = j.at("cwd").get<std::string>();
    e.address = j.at("address").get<std::string>();
    e.port = j.at("port").get<int>();
    e.host = j.value("host", "");
    e.started = j.value("started", 0.0);
    e.proc_start = j.value("proc_start", 0ULL);
    e.socket = j.value("socket", "");
    if (e.port < 0 || e.port > 65535 || (e.port == 0 && e.socket.empty())) return std::nullopt;
    return e;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::optional<BeaconEntry> choose_beacon(const std::vector<BeaconEntry>& live,
                                         const std::string& cwd) {
  // Started from here first; then one started with --status-port (meant to be watched: two
  // nodes of a job on one machine, one of them serving the job's view); then the newest.
  auto rank = [&](const BeaconEntry& e) {
    return std::make_tuple(e.cwd == cwd, e.port > 0, e.started);
  };
  const BeaconEntry* best = nullptr;
  for (const auto& e : live) {
    if (!best || rank(e) > rank(*best)) best = &e;
  }
  if (best) return *best;
  return std::nullopt;
}

namespace {
// A beacon is one short JSON line; anything else in the directory (a FIFO, a huge file, a link)
// is not read: opened without blocking or following links, and read only while small.
constexpr size_t kMaxBeaconBytes = size_t{64} * 1024;

std::optional<std::string> read_small_regular_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> text;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<size_t>(st.st_size) <= kMaxBeaconBytes) {
    std::string buffer(kMaxBeaconBytes + 1, '\0');
    size_t got = 0;
    ssize_t n = 0;
    while (got < buffer.size() && (n = ::read(fd, buffer.data() + got, buffer.size() - got)) > 0)
      got += static_cast<size_t>(n);
    if (n >= 0 && got <= kMaxBeaconBytes) text = buffer.substr(0, got);
  }
  ::close(fd);
  return text;
}
}  // namespace

std::optional<BeaconEntry> find_status_beacon(const std::string& dir, const std::string& cwd) {
  if (dir.empty()) return std::nullopt;
  std::vector<BeaconEntry> live;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* ent = ::readdir(d)) {
      const std::string name = ent->d_name;
      if (name.rfind("status-", 0) != 0 || name.size() < 5 ||
          name.compare(name.size() - 5, 5, ".json") != 0) {
        continue;
      }
      std::string path = dir;
      path += '/';
      path += name;
      const auto text = read_small_regular_file(path);
      if (!text) continue;
      auto e = parse_beacon(*text);
      if (!e || !alive(e->pid)) continue;
      if (e->proc_start != 0) {
        // The pid is another process's now (ddprun SIGKILLed, its pid reused): a stale beacon,
        // removed (the directory is this user's own).
        const auto start = process_start_time(e->pid);
        if (start && *start != e->proc_start) {
          ::unlink(path.c_str());
          continue;
        }
      }
      live.push_back(*e);
    }
    ::closedir(d);
  }
  return choose_beacon(live, cwd);
}

}  // namespace ddp::launcher::health
