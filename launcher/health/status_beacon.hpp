// SPDX-License-Identifier: MIT
#pragma once
/// StatusBeacon: how `ddprun top` finds a running job without being told its port. While the
/// status endpoint is open (its Unix socket always, TCP with --status-port), ddprun keeps one
/// small file, `<dir>/status-<pid>.json`, naming the endpoint (the TCP address and port, 0 without
/// --status-port; the socket's path), the directory ddprun was started from and its pid; it is
/// removed when the endpoint closes. <dir> is `$XDG_RUNTIME_DIR/ddprun`, else `/tmp/ddprun-<uid>`
/// (made 0700, used only when it is this user's own directory). A beacon that cannot be written is
/// skipped silently: it never fails a job. See docs/health.md ("Seeing a job").

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher::health {

struct BeaconEntry {
  pid_t pid = 0;
  std::string cwd;
  std::string address;  // as --status-addr
  int port = 0;         // 0: no --status-port (the socket only)
  std::string host;
  double started = 0;  // seconds since the epoch
  /// The process's start time in clock ticks since boot (/proc/PID/stat's 22nd field): a beacon
  /// whose pid now belongs to another process (ddprun was SIGKILLed, the pid reused) is stale.
  /// 0: not written (an older ddprun): the pid alone is checked.
  unsigned long long proc_start = 0;
  std::string socket;  // the Unix socket's path ("" when it could not be opened)
};

/// The 22nd field (starttime) of a /proc/PID/stat text; nullopt when it cannot be read. The
/// command name (field 2, in parentheses) may hold spaces and parentheses itself.
std::optional<unsigned long long> proc_start_time(const std::string& stat_text);
/// /proc/PID/stat's start time of `pid`, nullopt when there is no such process.
std::optional<unsigned long long> process_start_time(pid_t pid);

/// The beacon directory for this user ("" when none can be used; then `refused`, if given, says
/// why each candidate was refused, e.g. "/tmp/ddprun-1000 belongs to uid 0, not to this user").
std::string status_beacon_dir(std::string* refused = nullptr);

class StatusBeacon {
 public:
  /// Writes the beacon; nullptr when it cannot (no usable directory, a full disk).
  /// `port` 0: no TCP endpoint; `socket` "": no Unix socket (not both).
  static std::unique_ptr<StatusBeacon> write(const std::string& dir, const std::string& address,
                                             int port, const std::string& host,
                                             const std::string& socket = {});
  ~StatusBeacon();
  StatusBeacon(const StatusBeacon&) = delete;
  StatusBeacon& operator=(const StatusBeacon&) = delete;

 private:
  explicit StatusBeacon(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

/// Parses one beacon file's text; nullopt for anything else (and for one naming no endpoint).
std::optional<BeaconEntry> parse_beacon(const std::string& text);
/// Pure: among live beacons, the job started from `cwd`, else any of the user's; among those, one
/// with a TCP port (--status-port) first, then the newest.
std::optional<BeaconEntry> choose_beacon(const std::vector<BeaconEntry>& live,
                                         const std::string& cwd);
/// Reads `dir`'s beacons, drops those whose ddprun is gone, and chooses as above.
std::optional<BeaconEntry> find_status_beacon(const std::string& dir, const std::string& cwd);

}  // namespace ddp::launcher::health
