// SPDX-License-Identifier: MIT
#pragma once
/// The job-wide view (docs/health.md, "Every node's ranks"): what each node publishes about its
/// ranks in the rendezvous store (the record below, under .../view/<node_rank>, on its
/// heartbeat), and the merge of this node's ranks with the records of the others into the one
/// "ranks" list of /status. Pure: the store I/O is rdzv::NodeMonitor's, the clock the caller's.
///
/// The record is job-controlled text (another node wrote it): it is bounded when written and
/// when read (anything too large, not JSON or of another shape is ignored, field by field),
/// carries ages rather than times (the hosts' clocks need not agree), and every string in it is
/// rendered through the terminal sanitiser by `top` and as text (never HTML) by the dashboard.

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/health/failure_log.hpp"

namespace ddp::launcher::health {

/// Bounds of a published record.
inline constexpr size_t kMaxPublishedRanks = 64;     // per node; the rest are counted
inline constexpr size_t kMaxPublishedText = 64;      // bytes of a state or exit text
inline constexpr size_t kMaxPublishedHost = 255;     // bytes of a host name
inline constexpr size_t kMaxPublishedBytes = 65536;  // a whole record, as read
/// This node's rank failures in its record (its FailureLog's last ones, so that every node's
/// /status shows why another node's rank failed): fewer and shorter than the log keeps, since
/// the record is rewritten every second; the ranks come first, failures take what is left of
/// kMaxPublishedBytes (newest first; the others counted in failures_left_out).
inline constexpr size_t kMaxPublishedFailures = 4;
inline constexpr size_t kMaxPublishedMessage = 1024;    // bytes of a message (its start)
inline constexpr size_t kMaxPublishedTraceback = 4096;  // bytes of a traceback (its end)
inline constexpr size_t kMaxPublishedTailLines = 10;    // stderr lines (the last ones)
inline constexpr size_t kMaxPublishedTailLine = 256;    // bytes of a stderr line
/// A published CPU% or RSS beyond these is not a process's (1024 cores busy, 1 PiB): absent.
inline constexpr double kMaxPublishedCpuPercent = 102400;
inline constexpr long long kMaxPublishedRssBytes = 1LL << 50;

/// One rank as its node publishes it.
struct PublishedRank {
  int rank = 0;
  int local_rank = 0;
  long long pid = 0;
  std::string state;  // running, exited
  std::optional<long long> step;
  std::optional<double> age_s;        // since its last progress, by its node's clock
  std::string exit;                   // "" while running, else the code or the signal's name
  std::optional<double> cpu_percent;  // rank_usage.hpp; absent: not known (or an older agent)
  std::optional<long long> rss_bytes;
  bool stopped =
      false;  // ddprun stopped it (another rank's failure, a hang): no failure of its own
  bool operator==(const PublishedRank&) const = default;
};

/// A node's record.
struct PublishedNode {
  std::string host;
  int attempt = 0;
  std::vector<PublishedRank> ranks;   // at most kMaxPublishedRanks
  long long ranks_left_out = 0;       // ranks beyond the bound
  std::vector<RankFailure> failures;  // oldest first, at most kMaxPublishedFailures
  long long failures_left_out = 0;    // failures beyond the bounds (older ones)
  bool operator==(const PublishedNode&) const = default;
};

/// The record as one line of JSON, within kMaxPublishedBytes (ranks beyond the bound counted).
std::string encode_published_node(const PublishedNode& node);
/// The record read back; nullopt for anything too large, not JSON or not an object. Unknown
/// fields are ignored; a row whose rank is missing, wrong-typed, out of range or repeated is
/// skipped; another wrong-typed or out-of-range number reads as absent: a newer or older agent's
/// record reads as far as it can.
std::optional<PublishedNode> decode_published_node(std::string_view text);

/// Another node as this one sees it.
struct RemoteNodeView {
  int node_rank = 0;
  std::string name;                        // its host name in the assignment
  bool lost = false;                       // its heartbeat stopped
  std::optional<PublishedNode> published;  // nullopt: nothing yet (or an older agent)
  double received_age_s = 0;               // since this node read the record, by this clock
};

/// How this node's view of the job ended, if it did.
enum class JobEnd { No, Succeeded, Failed };
/// A record that has not changed for this long is stale: each node rewrites its own every second
/// (its ranks' ages change), so its node or this node's reading has stopped.
inline constexpr double kStaleRecordS = 10;
/// What a remote rank published as its state, as this node may show it: a "running" rank is
/// "lost" with its node, "exited" after the job succeeded, "unknown" after a failure or from a
/// stale record (never "running" on a guess).
std::string shown_remote_state(const std::string& published, bool node_lost, double record_age_s,
                               JobEnd end);

/// This node's "ranks" of /status (each gets "node_rank" and "host") followed by the other
/// nodes' published ranks, by node rank ("remote": true; the age is the published age plus the
/// time since it was read; the state as shown_remote_state says; a rank already listed, by this
/// node or an earlier one, is not listed again). A node that published nothing contributes no
/// rows (the dashboard lists its ranks from the round's assignment).
nlohmann::json merge_job_ranks(nlohmann::json local_ranks, int node_rank, const std::string& host,
                               const std::vector<RemoteNodeView>& remote, JobEnd end = JobEnd::No);

/// "failures" of /status: this node's (each gets "host", and "node_rank" unless it has one: the
/// node's rank when it failed) and the other nodes' published ones ("remote": true), ordered by
/// attempt, then node rank (a stable merge).
/// `decided`: this node's decision per attempt (the job-wide cause every node agreed on,
/// AttemptCause): every failure of such an attempt, another node's too, is placed by it (the root
/// cause, or caused by it), so a record another node published before its own decision (a race at
/// the end) does not show a second root cause. A consequence's cause rank is looked up in the cause
/// node's root cause of the same attempt; within an attempt the root cause comes first.
nlohmann::json merge_job_failures(nlohmann::json local_failures, int node_rank,
                                  const std::string& host,
                                  const std::vector<RemoteNodeView>& remote,
                                  const std::map<int, AttemptCause>& decided = {});
/// How many failures the other nodes left out of their records.
long long remote_failures_left_out(const std::vector<RemoteNodeView>& remote);

/// "job_nodes" of /status: this node and each other one with "up" or "lost", its host, when its
/// record was read and how many ranks it published.
nlohmann::json job_nodes_json(int node_rank, const std::string& host, size_t local_ranks,
                              const std::vector<RemoteNodeView>& remote);

}  // namespace ddp::launcher::health
