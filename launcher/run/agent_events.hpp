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

/// `summary`: the exit code, every attempt's workers and, when set, why the run ended.
/// `job_root_cause`: the multi-node root cause every node agreed on (empty on one node).
nlohmann::json summary_fields(int exit_code, const std::vector<AttemptOutcome>& attempts,
                              const std::optional<RunEnd>& end, const std::string& job_root_cause);

}  // namespace ddp::launcher
