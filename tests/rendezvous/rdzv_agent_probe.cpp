// Test helper: one "agent" as its own process. Joins a rendezvous on a running store, prints the
// result as one JSON line, then heartbeats and prints one line per event until --hold-ms passes:
//   LOST <node_rank> <name>      another node stopped heartbeating
//   STOP <reason>                a node broadcast a stop
// Exit status: 0 after the hold, 2 if the join failed (message on stderr).
//
//   rdzv_agent_probe --port P [--run-id R] [--min N] [--max N] [--node-rank R] [--lws K] [--name S]
//                    [--token T] [--hb-ms 50] [--hb-timeout-ms 500] [--hold-ms 3000]
//                    [--stop-after-ms -1]

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "rendezvous/node_rendezvous.hpp"

using namespace ddp::rdzv;

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  auto get = [&](const std::string& k, const std::string& d) {
    return args.count(k) ? args[k] : d;
  };
  StoreClientOptions store;
  store.port = static_cast<std::uint16_t>(std::stoi(get("--port", "0")));
  NodeRendezvousOptions o;
  o.run_id = get("--run-id", "probe");
  o.min_nodes = std::stoi(get("--min", "1"));
  o.max_nodes = std::stoi(get("--max", "1"));
  o.node_rank = std::stoi(get("--node-rank", "-1"));
  o.local_world_size = std::stoi(get("--lws", "1"));
  o.node_name = get("--name", "probe");
  o.token = get("--token", "");
  o.join_timeout = std::chrono::milliseconds(std::stoi(get("--join-timeout-ms", "20000")));
  o.last_call_timeout = std::chrono::milliseconds(std::stoi(get("--last-call-ms", "300")));
  RendezvousResult r;
  try {
    r = join_rendezvous(store, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  fmt::print(
      "{{\"name\":\"{}\",\"node_rank\":{},\"num_nodes\":{},\"world_size\":{},\"base_rank\":{},"
      "\"local_world_size\":{}}}\n",
      o.node_name, r.node_rank, r.num_nodes, r.world_size, r.base_rank, r.local_world_size);
  std::fflush(stdout);
  std::mutex out;
  NodeMonitor::Callbacks cb;
  cb.on_node_lost = [&](const NodeAssignment& n) {
    std::lock_guard lock(out);
    fmt::print("LOST {} {}\n", n.node_rank, n.name);
    std::fflush(stdout);
  };
  cb.on_stop = [&](const std::string& reason) {
    std::lock_guard lock(out);
    fmt::print("STOP {}\n", reason);
    std::fflush(stdout);
  };
  NodeMonitor monitor(store, o, r,
                      {std::chrono::milliseconds(std::stoi(get("--hb-ms", "50"))),
                       std::chrono::milliseconds(std::stoi(get("--hb-timeout-ms", "500")))},
                      cb);
  const auto start = std::chrono::steady_clock::now();
  const int stop_after = std::stoi(get("--stop-after-ms", "-1"));
  const auto hold = std::chrono::milliseconds(std::stoi(get("--hold-ms", "3000")));
  bool stopped = false;
  while (std::chrono::steady_clock::now() - start < hold) {
    if (!stopped && stop_after >= 0 &&
        std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(stop_after)) {
      monitor.broadcast_stop(fmt::format("node {} ({}): rank {} exited with code 3", r.node_rank,
                                         o.node_name, r.base_rank));
      stopped = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}
