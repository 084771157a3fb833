// ddprun-store: the ddprun TCP store on its own (also reachable as `ddprun --store-only`).
// Prints the port it listens on as the first line of stdout, serves until SIGINT/SIGTERM.

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>

#include "rendezvous/store_server.hpp"

namespace {

// Thousands of clients need thousands of descriptors; the soft limit is often far below the hard one.
void raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ddp::rdzv::StoreServerOptions opts;
  opts.port = 29500;
  CLI::App app{"ddprun-store: a c10d-compatible TCP store (torch 1.13 and 2.x clients)", "ddprun-store"};
  app.add_option("--host", opts.bind_address, "address to listen on")->capture_default_str();
  app.add_option("--port", opts.port, "port to listen on; 0 picks a free one (printed on stdout)")
      ->capture_default_str();
  app.add_option("--max-key-bytes", opts.limits.max_key_bytes, "largest key accepted")->capture_default_str();
  app.add_option("--max-value-bytes", opts.limits.max_value_bytes, "largest value accepted")->capture_default_str();
  app.add_option("--max-keys-per-request", opts.limits.max_keys_per_request,
                 "most keys in one CHECK/WAIT/MULTI_GET/MULTI_SET")
      ->capture_default_str();
  app.add_option("--max-request-bytes", opts.limits.max_request_bytes, "largest single request")
      ->capture_default_str();
  app.add_option("--max-connections", opts.limits.max_connections, "most concurrent connections")
      ->capture_default_str();
  app.add_flag("--trace", opts.trace, "log every request on stderr (protocol debugging)");
  CLI11_PARSE(app, argc, argv);

  raise_fd_limit();
  boost::asio::io_context io(1);  // one thread runs it: lets Asio skip internal locking
  try {
    ddp::rdzv::StoreServer server(io, opts);
    std::cout << server.port() << std::endl;  // first line: the port clients should use
    server.start();
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      server.stop();
      io.stop();
    });
    io.run();
  } catch (const ddp::rdzv::StoreBindError& e) {
    std::cerr << "ddprun-store: " << e.what();
    if (opts.port != 0) std::cerr << " (use --port 0 to let the system pick a free port)";
    std::cerr << '\n';
    return 1;
  }
  return 0;
}
