// One thread per simulated rank, each a blocking StoreClient (WAIT+GET like torch's client),
// doing PyTorch's init against the store address its node uses: the ADD-then-WAIT barrier, rank
// 0's SET of the unique id read by everyone, and Gloo's address exchange (SET own, GET each peer).
//   proxy_init_ranks WORLD PORT_OF_RANK_0 [PORT_OF_RANK_1 ...]   (ports repeat per node)
// Prints the wall time of the whole init in seconds.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store_client.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: proxy_init_ranks WORLD PORT...\n");
    return 2;
  }
  const int world = std::atoi(argv[1]);
  std::vector<std::uint16_t> ports;
  for (int i = 2; i < argc; ++i) ports.push_back(static_cast<std::uint16_t>(std::atoi(argv[i])));
  if (world <= 0 || static_cast<int>(ports.size()) != world) {
    std::fprintf(stderr, "proxy_init_ranks: give one port per rank (%d ranks, %zu ports)\n", world,
                 ports.size());
    return 2;
  }
  std::vector<std::unique_ptr<ddp::rdzv::StoreClient>> clients;
  for (int r = 0; r < world; ++r) {
    ddp::rdzv::StoreClientOptions o;
    o.port = ports[static_cast<std::size_t>(r)];
    clients.push_back(std::make_unique<ddp::rdzv::StoreClient>(o));
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  int failures = 0;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto& c = *clients[static_cast<std::size_t>(r)];
        if (c.add("barrier/count", 1) == world) c.set("barrier/done", "1");
        c.wait({"barrier/done"});
        if (r == 0) c.set("nccl/unique_id", std::string(128, 'x'));
        c.get("nccl/unique_id");
        c.set("gloo/addr/" + std::to_string(r), std::string(170, 'y'));
        for (int peer = 0; peer < world; ++peer) c.get("gloo/addr/" + std::to_string(peer));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.3f\n", s);
  return failures == 0 ? 0 : 1;
}
