// SPDX-License-Identifier: MIT
#include "launcher/health/status_beacon.hpp"
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
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ddp::launcher::health {

namespace {

// This user's own directory, 0700: a directory anyone else owns (or a link) is not used.
bool usable_dir(const std::string& dir, bool make) {
  if (make) ::mkdir(dir.c_str(), 0700);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return false;
  return S_ISDIR(st.st_mode) && st.st_uid == ::getuid() && (st.st_mode & 0077) == 0;
}

std::string current_dir() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

bool alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

}  // namespace

std::string status_beacon_dir() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) {
    std::string dir = std::string(xdg) + "/ddprun";
    if (usable_dir(dir, true)) return dir;
  }
  std::string dir = fmt::format("/tmp/ddprun-{}", ::getuid());
  return usable_dir(dir, true) ? dir : std::string();
}

std::unique_ptr<StatusBeacon> StatusBeacon::write(const std::string& dir,
                                                  const std::string& address, int port,
                                                  const std::string& host) {
  if (dir.empty()) return nullptr;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json j{{"pid", ::getpid()},  {"cwd", current_dir()},
                   {"address", address}, {"port", port},
                   {"host", host},       {"started", std::chrono::duration<double>(now).count()}};
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
    if (e.port <= 0 || e.port > 65535) return std::nullopt;
    return e;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::optional<BeaconEntry> choose_beacon(const std::vector<BeaconEntry>& live,
                                         const std::string& cwd) {
  const BeaconEntry* same_dir = nullptr;
  const BeaconEntry* newest = nullptr;
  for (const auto& e : live) {
    if (!newest || e.started > newest->started) newest = &e;
    if (e.cwd == cwd && (!same_dir || e.started > same_dir->started)) same_dir = &e;
  }
  if (same_dir) return *same_dir;
  if (newest) return *newest;
  return std::nullopt;
}

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
      std::ifstream in(dir + "/" + name);
      std::stringstream text;
      text << in.rdbuf();
      auto e = parse_beacon(text.str());
      if (e && alive(e->pid)) live.push_back(*e);
    }
    ::closedir(d);
  }
  return choose_beacon(live, cwd);
}

}  // namespace ddp::launcher::health
