// SPDX-License-Identifier: MIT
#pragma once
/// The job's store in /metrics: the counters of the store server this agent hosts (connections
/// open, accepted and refused, requests by operation, keys, waits, bytes) as Prometheus families
/// named ddprun_store_*. Pure: the HostedStore reads the server's stats, this formats them.

#include "launcher/health/prometheus_text.hpp"
#include "rendezvous/store_stats.hpp"

namespace ddp::launcher::health {

void append_store_metrics(PrometheusText& out, const rdzv::StoreServerStats& stats);

}  // namespace ddp::launcher::health
