#pragma once
/// Turning the master host name into an address (I/O: DNS and `scontrol`, both with deadlines).

#include <chrono>
#include <optional>
#include <string>

#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

struct ResolveOptions {
  std::chrono::milliseconds timeout{5000};  ///< for each of DNS and scontrol
  bool ask_slurm = true;                    ///< fall back to Slurm's NodeAddr
  std::string scontrol = "scontrol";        ///< program looked up in PATH
};

/// The first IPv4 address of `host` (else the first IPv6 one), or nullopt when it does not
/// resolve within `timeout`. A lookup still running at the deadline is abandoned in a detached
/// thread (getaddrinfo cannot be cancelled); the caller never waits longer than `timeout`.
std::optional<std::string> resolve_dns(const std::string& host, std::chrono::milliseconds timeout);

/// Slurm's NodeAddr for node `name` from `scontrol -o show node NAME` (SLURM_CONF is inherited).
/// nullopt when scontrol is missing, fails, or does not know the node; SchedulerError on timeout.
std::optional<std::string> query_slurm_node_addr(const std::string& name,
                                                 const ResolveOptions& options);

/// DNS first; when the name does not resolve and options.ask_slurm, Slurm's NodeAddr (itself
/// resolved when it is a name). Slurm node names need not be network names (the multiple-slurmd
/// test cluster's n1/n2 share 127.0.0.1). Throws SchedulerError naming the host and what was tried.
HostResolution resolve_master_host(const std::string& host, const ResolveOptions& options = {});

}  // namespace ddp::launcher::scheduler
