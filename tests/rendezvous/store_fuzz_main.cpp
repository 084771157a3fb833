// Live-server fuzzing: random, damaged and valid frames from many connections against a real
// ddprun-store process for a bounded time. Afterwards a well-behaved client must still be
// served and the server's memory must have stayed bounded.
//
//   rdzv_store_fuzz STORE_BIN [--seconds S] [--seed N] [--max-rss-growth-mib M]
// Exit status 0 = pass; the last line says why otherwise.

#include <chrono>
#include <cstdio>
#include <deque>
#include <string>

#include <fmt/format.h>

#include "rendezvous/blocking_socket.hpp"
#include "rendezvous/store_client.hpp"
#include "tests/rendezvous/child_process.hpp"
#include "tests/rendezvous/fuzz_frames.hpp"

using namespace ddp::rdzv;
using namespace ddp::rdzv::test;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string store_bin;
  double seconds = 3.0;
  std::uint64_t seed = 1;
  long max_rss_growth_mib = 64;
};

Args parse(int argc, char** argv) {
  if (argc < 2)
    throw std::runtime_error(
        "usage: rdzv_store_fuzz STORE_BIN [--seconds S] [--seed N] [--max-rss-growth-mib M]");
  Args a;
  a.store_bin = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds")
      a.seconds = std::stod(argv[i + 1]);
    else if (flag == "--seed")
      a.seed = std::stoull(argv[i + 1]);
    else if (flag == "--max-rss-growth-mib")
      a.max_rss_growth_mib = std::stol(argv[i + 1]);
    else
      throw std::runtime_error("unknown flag " + flag);
  }
  return a;
}

// Send one fuzz stream; the server may close on us at any point, which is fine.
void play(FrameFuzzer& fuzz, std::uint16_t port, std::deque<BlockingSocket>& parked) {
  const Generation gen = fuzz.generation();
  const std::string stream = fuzz.stream(gen, 1 + fuzz.below(10));
  try {
    BlockingSocket sock =
        BlockingSocket::connect("127.0.0.1", port, Clock::now() + std::chrono::seconds(2));
    std::size_t sent = 0;
    for (std::size_t chunk : fuzz.splits(stream.size())) {
      sock.send_all(std::string_view(stream).substr(sent, chunk),
                    Clock::now() + std::chrono::milliseconds(200));
      sent += chunk;
    }
    // Drain whatever answers came back, without waiting for ones that never will.
    char buf[4096];
    while (sock.wait_readable(Clock::now() + std::chrono::milliseconds(1))) {
      sock.recv_exact(buf, 1, Clock::now() + std::chrono::milliseconds(1));
    }
    // Some connections stay open and silent (stalled or half-open clients, pending WAITs).
    if (fuzz.chance(5)) {
      parked.push_back(std::move(sock));
      if (parked.size() > 200) parked.pop_front();
    }
  } catch (const StoreError&) {
    // closed by the server (bad frame) or a reply we did not read: expected
  }
}

void check_served(std::uint16_t port, std::uint64_t round) {
  StoreClientOptions o;
  o.port = port;
  o.key_prefix = "/canary/";
  o.connect_timeout = std::chrono::seconds(5);
  o.timeout = std::chrono::seconds(5);
  StoreClient c(o);
  const std::string value = std::to_string(round);
  c.set("value", value);
  if (c.get("value") != value) throw std::runtime_error("canary value corrupted");
  c.add("count", 1);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    ChildProcess store({args.store_bin, "--port", "0", "--max-key-bytes", "1024",
                        "--max-value-bytes", "65536", "--max-keys-per-request", "64"},
                       /*quiet=*/true);
    const auto port =
        static_cast<std::uint16_t>(std::stoi(store.read_line(std::chrono::seconds(10))));
    check_served(port, 0);
    const long rss_start = rss_kib(store.pid());
    FrameFuzzer fuzz(args.seed);
    std::deque<BlockingSocket> parked;
    const auto end = Clock::now() + std::chrono::duration<double>(args.seconds);
    std::uint64_t rounds = 0;
    long rss_peak = rss_start;
    while (Clock::now() < end) {
      play(fuzz, port, parked);
      if (++rounds % 100 == 0) {
        check_served(port, rounds);
        rss_peak = std::max(rss_peak, rss_kib(store.pid()));
      }
    }
    check_served(port, rounds);
    parked.clear();
    check_served(port, rounds + 1);
    rss_peak = std::max(rss_peak, rss_kib(store.pid()));
    const long growth_mib = (rss_peak - rss_start) / 1024;
    fmt::print(
        "fuzzed {} connections for {:.1f} s (seed {}); server RSS {} KiB at start, peak {} KiB\n",
        rounds, args.seconds, args.seed, rss_start, rss_peak);
    if (growth_mib > args.max_rss_growth_mib) {
      fmt::print("FAIL: server RSS grew by {} MiB (limit {} MiB)\n", growth_mib,
                 args.max_rss_growth_mib);
      return 1;
    }
    const int rc = store.stop();
    if (rc != 0) {
      fmt::print("FAIL: ddprun-store exited with {} on SIGTERM\n", rc);
      return 1;
    }
    fmt::print("PASS\n");
    return 0;
  } catch (const std::exception& e) {
    fmt::print("FAIL: {}\n", e.what());
    return 1;
  }
}
