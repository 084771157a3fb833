// SPDX-License-Identifier: MIT
#include "launcher/health/store_metrics.hpp"

#include <cctype>
#include <string>

namespace ddp::launcher::health {
namespace {

// "COMPARE_SET" -> "compare_set": Prometheus label values in the usual lower case.
std::string lower(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void append_store_metrics(PrometheusText& out, const rdzv::StoreServerStats& s) {
  auto d = [](auto v) { return static_cast<double>(v); };
  out.family("ddprun_store_connections", "gauge", "Connections open to the store this agent hosts")
      .sample({}, d(s.connections));
  out.family("ddprun_store_connections_accepted_total", "counter", "Connections the store accepted")
      .sample({}, d(s.connections_accepted));
  out.family("ddprun_store_connections_refused_total", "counter",
             "Connections refused at the store's connection limit")
      .sample({}, d(s.connections_refused));
  out.family("ddprun_store_connections_closed_for_errors_total", "counter",
             "Connections the store closed for a bad or oversize request")
      .sample({}, d(s.closed_for_errors));
  auto& requests =
      out.family("ddprun_store_requests_total", "counter", "Requests the store received, by op");
  for (std::size_t i = 0; i < rdzv::kOpCount; ++i) {
    requests.sample({{"op", lower(rdzv::op_name(static_cast<rdzv::Op>(i)))}}, d(s.requests[i]));
  }
  out.family("ddprun_store_keys", "gauge", "Keys in the store").sample({}, d(s.keys));
  out.family("ddprun_store_bytes", "gauge", "Bytes the store's keys and values hold")
      .sample({}, d(s.store_bytes));
  out.family("ddprun_store_pending_waits", "gauge", "WAIT requests not yet satisfied")
      .sample({}, d(s.pending_waits));
}

}  // namespace ddp::launcher::health
