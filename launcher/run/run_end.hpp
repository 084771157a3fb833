// SPDX-License-Identifier: MIT
#pragma once
/// RunEnd: why an attempt (and, when no restart follows, the run) ends, as one value: what kind
/// of cause, ddprun's exit code, one line of text and the node it happened on. The Agent offers
/// every cause it learns of (a worker's failure, a stop from another node, a lost node, a
/// signal, ...) and these rules decide which one stands: the first cause wins, except where a
/// rule below says a later one replaces it. Pure; unit-tested in tests/launcher/unit.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/multinode/job_rendezvous.hpp"
#include "launcher/run/failure_report.hpp"
#include "launcher/status/exit_status.hpp"

namespace ddp::launcher {

enum class RunEndKind {
  WorkerFailed,  // a worker of this node failed (or could not start)
  Hung,          // this node judged the job hung (--hang-timeout, docs/health.md): exit 75
  JobStopped,    // another node's failure stopped the job (the store's first stop reason)
  NodeLost,      // another node, or the store's host, vanished, and the job cannot go on
  Rescale,       // a node vanished and the survivors re-form without it (elastic; not a failure)
  Rendezvous,    // the nodes never met (join timeout, refused join, unreachable store)
  Interrupted,   // ddprun itself received a shutdown signal
  Internal,      // ddprun could not do its own job (fork, pipe, run directory)
};

struct RunEnd {
  RunEndKind kind = RunEndKind::WorkerFailed;
  int exit_code = 1;
  std::string text;            // one line: "rank 3 failed with exit code 1", "lost node 2 (h): ..."
  int node_rank = -1;          // the node where it happened (-1: not known or not multi-node)
  int signal = 0;              // Interrupted: the signal ddprun received
  std::vector<int> survivors;  // Rescale: the round's node ranks that go on, in order
  std::vector<std::int64_t> admitted;  // Rescale: pending nodes that join after the survivors
  bool from_store = false;             // JobStopped, or a Rescale adopted from another node
};

/// `node_rank` >= 0 (multi-node): the text names the node ("node 1 (host-b): rank 3 ...") so
/// that every node reports the same words.
RunEnd worker_failed(const WorkerOutcome& worker, int node_rank, const std::string& host);
/// This node's health monitor judged the job hung (`what`: its one line). Named after the node
/// as worker_failed() does when `node_rank` >= 0.
RunEnd hung(const std::string& what, int node_rank, const std::string& host);
/// Another node's broadcast: a failure (JobStopped) or a re-form (Rescale).
RunEnd job_stopped(const StopReason& reason);
/// This node decided that the job re-forms from `survivors` (see membership.hpp).
RunEnd rescale(const std::string& text, std::vector<int> survivors, int node_rank,
               std::vector<std::int64_t> admitted = {});
RunEnd node_lost(const NodeLoss& loss);
RunEnd rendezvous_failed(const std::string& error);
RunEnd interrupted(int signal);
RunEnd internal_error(int exit_code, const std::string& message);

/// True when `incoming` replaces `current` as the end of the attempt. The rules, in order:
///  1. An internal error replaces any other cause: ddprun could not do its job, and hiding that
///     behind a worker's code would send people to the wrong place.
///  2. A shutdown signal replaces any cause but an internal error: whoever sent it (a user, a
///     scheduler's time limit) must see 128+N, as from any interrupted program.
///  3. A stop or re-form from another node (the store's first reason) replaces this node's own
///     failure or hang verdict, a lost node and this node's own re-form: the store's first reason
///     is the job's, and every node must act on the same one (same root cause, same survivors).
///  4. A lost store replaces a re-form: nothing can re-form without the store.
///  5. Otherwise the first cause stands.
bool replaces(const RunEnd& incoming, const RunEnd& current);

/// Offers a cause; returns true when it became (or replaced) the end of the attempt.
bool offer(std::optional<RunEnd>& end, RunEnd incoming);

/// A cause that a restart can cure (with restarts left): a worker failure or a hang, here or
/// elsewhere (--no-progress-restarts may still refuse it). Losing a node, the rendezvous, a
/// signal or an internal error end the run.
bool restartable(const RunEnd& end);

/// What follows an attempt once its workers are gone (the Agent's after_attempt), in order:
///  1. AwaitVerdict: a local failure is held for the loss verdict; the verdict ends the attempt.
///  2. Leave: this node was quarantined (--node-failure-limit); the others re-form without it.
///  3. Reform: the end is a re-form and ddprun was not interrupted.
///  4. Restart: a restartable end with restarts left, not interrupted (--no-progress-restarts
///     may still refuse it: the caller asks the health monitor).
///  5. Finish: the run ends with the attempt's end (or success).
enum class NextStep { AwaitVerdict, Leave, Reform, Restart, Finish };
struct AttemptFlags {
  bool failure_held = false;
  bool quarantined = false;
  bool interrupted = false;
  int restarts_used = 0;
  int max_restarts = 0;
};
NextStep next_step(const std::optional<RunEnd>& end, const AttemptFlags& flags);

/// Whether a stop broadcast is this node's own (it already acted on it): decided by node rank.
bool is_own_stop(const StopReason& reason, int this_node_rank);

/// "worker_failed", "job_stopped", ... (the `kind` field of the summary event).
const char* kind_name(RunEndKind kind);

}  // namespace ddp::launcher
