// proxy_farm: many node-local store proxies in one process, for run_bench.py's `proxy` contender
// at tens of thousands of ranks (one ddprun-store-proxy process per 8 ranks does not fit 2 cores
// and 24 GiB at 64k ranks: 8000 processes). Each proxy is the same StoreProxy an agent runs,
// with its own listener and upstream links; they share one thread, as the proxies of that many
// nodes would share nothing but the root. Prints the ports, comma-separated, as one stdout line;
// serves until SIGINT/SIGTERM, then prints the summed counters on stderr as JSON.
//
//   proxy_farm --upstream HOST:PORT --count K [--host 127.0.0.1] [--max-watched-keys K]
//              [--base-port P] [--prefault-mib M] [--spread-upstream 1]
//   (--max-watched-keys 0: WAITs on WAIT links, as before the watch link)
//   --base-port P: proxy k listens on P + k (else the kernel picks, out of the ephemeral range
//     that the proxies' root links need too: at 12,500 proxies that range is half taken);
//     a port found taken falls back to a kernel-picked one.
//   --spread-upstream 1: proxy k connects to the root at 127.1.x.y (x.y = k + 1) instead of HOST,
//     for a root listening on every address. connect() picks an ephemeral port by scanning from
//     an offset that advances per (source, destination) pair, so N links from one address to one
//     root address cost O(N) each (measured: __inet_hash_connect + __inet_check_established 13%
//     of the farms' CPU at 64k ranks); one destination address per proxy makes it O(1).
//   --prefault-mib M: before the proxies start, touch M MiB of heap and keep it (no trim), so the
//     proxies' allocations do not page-fault during the run. For measuring what the page faults
//     cost (each worker connection's Downstream holds ~80 KiB of zeroed buffers); off by default.

#include <malloc.h>
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "rendezvous/proxy/store_proxy.hpp"

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  ddp::rdzv::proxy::StoreProxyOptions opts;
  std::string upstream;
  int count = 0;
  int base_port = 0;
  std::size_t prefault_mib = 0;
  bool spread_upstream = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--upstream")
      upstream = v;
    else if (f == "--count")
      count = std::stoi(v);
    else if (f == "--host")
      opts.bind_address = v;
    else if (f == "--base-port")
      base_port = std::stoi(v);
    else if (f == "--spread-upstream")
      spread_upstream = v != "0";
    else if (f == "--prefault-mib")
      prefault_mib = std::stoul(v);
    else if (f == "--max-watched-keys")
      opts.max_watched_keys = std::stoul(v);
    else {
      std::cerr << "proxy_farm: unknown option " << f << '\n';
      return 2;
    }
  }
  const auto colon = upstream.rfind(':');
  if (colon == std::string::npos || count < 1) {
    std::cerr << "usage: proxy_farm --upstream HOST:PORT --count K [--host ADDR]\n";
    return 2;
  }
  opts.upstream_host = upstream.substr(0, colon);
  opts.upstream_port = static_cast<std::uint16_t>(std::stoi(upstream.substr(colon + 1)));
  // The simulator plays thousands of ranks per thread on a shared machine and may not read a
  // reply for longer than the 30 s an agent's proxy allows a stalled worker: no idle timeout here
  // (measured: at 64k ranks every farm closed thousands of simulated ranks for it).
  opts.limits.idle_timeout = std::chrono::milliseconds(0);
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (prefault_mib > 0) {
    // Allocations stay on the brk heap (no mmap) and freed memory is never returned, so the
    // pages touched here serve the proxies' allocations without faulting again.
    ::mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum
    ::mallopt(M_TRIM_THRESHOLD, -1);        // never trim
    std::vector<void*> chunks;
    for (std::size_t i = 0; i < prefault_mib / 16; ++i) {
      chunks.push_back(std::malloc(16 << 20));
      if (chunks.back() != nullptr) std::memset(chunks.back(), 1, 16 << 20);
    }
    for (void* c : chunks) std::free(c);
  }
  boost::asio::io_context io(1);
  std::vector<std::unique_ptr<ddp::rdzv::proxy::StoreProxy>> proxies;
  try {
    std::string ports;
    for (int k = 0; k < count; ++k) {
      auto o = opts;
      if (spread_upstream)
        o.upstream_host = fmt::format("127.1.{}.{}", (k + 1) >> 8, (k + 1) & 255);
      if (base_port > 0) {
        o.port = static_cast<std::uint16_t>(base_port + k);
        try {
          proxies.push_back(std::make_unique<ddp::rdzv::proxy::StoreProxy>(io, o));
        } catch (const std::runtime_error&) {
          o.port = 0;
        }
      }
      if (o.port == 0) proxies.push_back(std::make_unique<ddp::rdzv::proxy::StoreProxy>(io, o));
      proxies.back()->start();
      ports += (k ? "," : "") + std::to_string(proxies.back()->port());
    }
    std::cout << ports << std::endl;
  } catch (const std::runtime_error& e) {
    std::cerr << "proxy_farm: proxy " << proxies.size() << ": " << e.what() << '\n';
    return 1;
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    ddp::rdzv::proxy::StoreProxyStats sum;
    for (const auto& p : proxies) {
      const auto s = p->stats();
      sum.downstream_requests += s.downstream_requests;
      sum.upstream_requests += s.upstream_requests;
      sum.upstream_connections_opened += s.upstream_connections_opened;
      sum.coalesced_requests += s.coalesced_requests;
      sum.watch_waits += s.watch_waits;
    }
    std::cerr << fmt::format(
        "{{\"downstream_requests\": {}, \"upstream_requests\": {}, "
        "\"upstream_connections_opened\": {}, \"coalesced_requests\": {}, \"watch_waits\": {}}}\n",
        sum.downstream_requests, sum.upstream_requests, sum.upstream_connections_opened,
        sum.coalesced_requests, sum.watch_waits);
    for (auto& p : proxies) p->stop();
    io.stop();
  });
  io.run();
  return 0;
}
