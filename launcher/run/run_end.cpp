// SPDX-License-Identifier: MIT
#include "launcher/run/run_end.hpp"

#include <fmt/format.h>

#include "common/exit_codes.hpp"
#include "launcher/multinode/multinode_settings.hpp"

namespace ddp::launcher {
namespace {

RunEnd make(RunEndKind kind, int exit_code, std::string text, int node_rank) {
  RunEnd end;
  end.kind = kind;
  end.exit_code = exit_code;
  end.text = std::move(text);
  end.node_rank = node_rank;
  return end;
}

}  // namespace

RunEnd worker_failed(const WorkerOutcome& worker, int node_rank, const std::string& host) {
  const ExitStatus status = worker.status.value_or(ExitStatus::exited(1));
  RunEnd end = make(RunEndKind::WorkerFailed, shell_exit_code(status), {}, node_rank);
  if (node_rank >= 0) {
    end.text = fmt::format("node {} ({}): rank {} (pid {}) failed with {}", node_rank, host,
                           worker.rank, worker.pid, describe(status));
  } else {
    end.text = fmt::format("rank {} failed with {}", worker.rank, describe(status));
  }
  return end;
}

RunEnd hung(const std::string& what, int node_rank, const std::string& host) {
  return make(RunEndKind::Hung, exit_codes::kHung,
              node_rank >= 0 ? fmt::format("node {} ({}): {}", node_rank, host, what) : what,
              node_rank);
}

RunEnd job_stopped(const StopReason& reason) {
  RunEnd end = make(RunEndKind::JobStopped, reason.exit_code, reason.text, reason.node_rank);
  end.from_store = true;
  if (!reason.survivors.empty()) {
    end.kind = RunEndKind::Rescale;
    end.survivors = reason.survivors;
    end.admitted = reason.admitted;
  }
  return end;
}

RunEnd rescale(const std::string& text, std::vector<int> survivors, int node_rank,
               std::vector<std::int64_t> admitted) {
  RunEnd end = make(RunEndKind::Rescale, exit_codes::kNodeLost, text, node_rank);
  end.survivors = std::move(survivors);
  end.admitted = std::move(admitted);
  return end;
}

RunEnd node_lost(const NodeLoss& loss) {
  return make(RunEndKind::NodeLost, exit_codes::kNodeLost, loss.text, loss.node_rank.value_or(-1));
}

RunEnd rendezvous_failed(const std::string& error) {
  return make(RunEndKind::Rendezvous, exit_codes::kUnavailable,
              fmt::format("rendezvous failed: {}", error), -1);
}

RunEnd interrupted(int signal) {
  RunEnd end = make(RunEndKind::Interrupted, exit_codes::kSignalBase + signal,
                    fmt::format("ddprun received {}", signal_name(signal)), -1);
  end.signal = signal;
  return end;
}

RunEnd internal_error(int exit_code, const std::string& message) {
  return make(RunEndKind::Internal, exit_code, message, -1);
}

bool replaces(const RunEnd& incoming, const RunEnd& current) {
  if (current.kind == RunEndKind::Internal) return false;
  if (incoming.kind == RunEndKind::Internal) return true;
  if (current.kind == RunEndKind::Interrupted) return false;
  if (incoming.kind == RunEndKind::Interrupted) return true;
  const bool current_is_local = current.kind == RunEndKind::WorkerFailed ||
                                current.kind == RunEndKind::Hung ||
                                current.kind == RunEndKind::NodeLost ||
                                (current.kind == RunEndKind::Rescale && !current.from_store);
  if (incoming.from_store) return current_is_local;
  const bool store_lost = incoming.kind == RunEndKind::NodeLost && incoming.node_rank < 0;
  return store_lost && current.kind == RunEndKind::Rescale;
}

bool offer(std::optional<RunEnd>& end, RunEnd incoming) {
  if (end && !replaces(incoming, *end)) return false;
  end = std::move(incoming);
  return true;
}

NextStep next_step(const std::optional<RunEnd>& end, const AttemptFlags& flags) {
  if (flags.failure_held) return NextStep::AwaitVerdict;
  if (flags.quarantined) return NextStep::Leave;
  if (!end || flags.interrupted) return NextStep::Finish;
  if (end->kind == RunEndKind::Rescale) return NextStep::Reform;
  if (restartable(*end) && flags.restarts_used < flags.max_restarts) return NextStep::Restart;
  return NextStep::Finish;
}

bool restartable(const RunEnd& end) {
  return end.kind == RunEndKind::WorkerFailed || end.kind == RunEndKind::Hung ||
         end.kind == RunEndKind::JobStopped;
}

bool is_own_stop(const StopReason& reason, int this_node_rank) {
  return reason.node_rank >= 0 && reason.node_rank == this_node_rank;
}

const char* kind_name(RunEndKind kind) {
  switch (kind) {
    case RunEndKind::WorkerFailed:
      return "worker_failed";
    case RunEndKind::Hung:
      return "hung";
    case RunEndKind::JobStopped:
      return "job_stopped";
    case RunEndKind::NodeLost:
      return "node_lost";
    case RunEndKind::Rescale:
      return "rescale";
    case RunEndKind::Rendezvous:
      return "rendezvous_failed";
    case RunEndKind::Interrupted:
      return "interrupted";
    case RunEndKind::Internal:
      return "internal_error";
  }
  return "unknown";
}

}  // namespace ddp::launcher
