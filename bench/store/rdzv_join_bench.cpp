// Multi-node rendezvous latency on loopback: N agents (threads with their own store connections,
// as separate ddprun processes would have) join one round; reports the time from the last agent's
// join call to every agent holding its assignment. Static and dynamic (MAX reached) rendezvous.
//
//   rdzv_join_bench [--agents 2,4,8] [--repeats 20]

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "rendezvous/node_rendezvous.hpp"
#include "rendezvous/store_server.hpp"

using namespace ddp::rdzv;
using Clock = std::chrono::steady_clock;

namespace {

double one_round(std::uint16_t port, int agents, bool dynamic, int round) {
  StoreClientOptions store;
  store.port = port;
  std::vector<std::future<Clock::time_point>> done;
  std::vector<Clock::time_point> started(static_cast<std::size_t>(agents));
  for (int i = 0; i < agents; ++i) {
    NodeRendezvousOptions o;
    o.run_id = dynamic ? "bench-dynamic" : "bench-static";
    o.round = round;
    o.node_name = fmt::format("agent{}", i);
    o.node_rank = dynamic ? -1 : agents - 1 - i;  // the leader (node 0) arrives last
    o.min_nodes = dynamic ? 1 : agents;
    o.max_nodes = agents;
    o.local_world_size = 1 + i % 3;
    o.join_timeout = std::chrono::seconds(30);
    o.last_call_timeout = std::chrono::seconds(30);  // MAX must close the round, not the last call
    done.push_back(std::async(std::launch::async, [&started, store, o, i] {
      started[static_cast<std::size_t>(i)] = Clock::now();
      join_rendezvous(store, o);
      return Clock::now();
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // staggered arrivals
  }
  Clock::time_point last_done{};
  for (auto& f : done) last_done = std::max(last_done, f.get());
  const auto last_start = *std::max_element(started.begin(), started.end());
  return std::chrono::duration<double, std::milli>(last_done - last_start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts{2, 4, 8};
  int repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::stoi(argv[i + 1]);
    if (flag == "--agents") {
      counts.clear();
      for (std::string v = argv[i + 1]; !v.empty();) {
        const auto comma = v.find(',');
        counts.push_back(std::stoi(v.substr(0, comma)));
        v = comma == std::string::npos ? "" : v.substr(comma + 1);
      }
    }
  }
  boost::asio::io_context io(1);
  StoreServer server(io, StoreServerOptions{});
  server.start();
  std::thread loop([&] { io.run(); });
  fmt::print("| agents | mode | median (ms) | max (ms) |\n|---:|---|---:|---:|\n");
  int round = 0;
  for (int n : counts) {
    for (bool dynamic : {false, true}) {
      std::vector<double> ms;
      for (int r = 0; r < repeats; ++r) ms.push_back(one_round(server.port(), n, dynamic, round++));
      std::sort(ms.begin(), ms.end());
      fmt::print("| {} | {} | {:.2f} | {:.2f} |\n", n, dynamic ? "dynamic (MAX reached)" : "static",
                 ms[ms.size() / 2], ms.back());
    }
  }
  boost::asio::post(io, [&] {
    server.stop();
    io.stop();
  });
  loop.join();
  return 0;
}
