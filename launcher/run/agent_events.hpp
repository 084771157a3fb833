// SPDX-License-Identifier: MIT
#pragma once
/// The fields of the --events records the Agent emits, built from its records. The Agent decides
/// when an event happens; the JSON shape of each one lives here (documented in docs/launcher.md).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launcher/run/failure_report.hpp"
#include "launcher/run/run_end.hpp"
#include "rendezvous/node_rendezvous.hpp"

namespace ddp::launcher {

/// {"exit_code": N} or {"signal": "SIGSEGV", "signal_number": 11}.
nlohmann::json exit_status_fields(const ExitStatus& status);

/// `worker_exit` of a worker that ran.
nlohmann::json worker_exit_fields(const WorkerOutcome& worker, int attempt);

/// `worker_exit` of a worker that could not start.
nlohmann::json start_failure_fields(const WorkerOutcome& worker, int attempt, int exit_code,
                                    const std::string& error);

/// `rendezvous`: this node's place in the round and every node of it.
nlohmann::json rendezvous_fields(int attempt, const rdzv::RendezvousResult& joined);

/// One membership change, as this node saw it: the round it left and the round that formed.
/// Both re-form paths (a lost heartbeat; a restart that formed with other nodes) fill all of it.
struct RescaleRecord {
  int attempt = 0;     // the new round's attempt
  std::string reason;  // why the membership changed
  std::string change;  // "loss", "admit" or "spare"
  std::vector<rdzv::NodeAssignment> old_nodes;
  int old_world_size = 0;
  std::vector<rdzv::NodeAssignment> new_nodes;
  int new_world_size = 0;
  double seconds = 0;  // this node's workers stopped -> the new round formed
};

/// `rescale`: every field of the record (node lists as names, `old_num_nodes`/`new_num_nodes`).
nlohmann::json rescale_fields(const RescaleRecord& change);

/// The change in words, for stderr and the summary's `membership_changes`:
/// "3 -> 2 node(s), world size 3 -> 2 (<reason>; re-formed in 0.31 s)".
std::string rescale_text(const RescaleRecord& change);

/// `summary`: the exit code, every attempt's workers and, when set, why the run ended.
/// `job_root_cause`: the multi-node root cause every node agreed on (empty on one node).
nlohmann::json summary_fields(int exit_code, const std::vector<AttemptOutcome>& attempts,
                              const std::optional<RunEnd>& end, const std::string& job_root_cause);

}  // namespace ddp::launcher
