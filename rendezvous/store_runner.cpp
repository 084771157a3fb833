#include "rendezvous/store_runner.hpp"

#include <sys/resource.h>

#include <csignal>
#include <iostream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "common/exit_codes.hpp"

namespace ddp::rdzv {

std::optional<rlim_t> raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    const rlim_t before = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) return before;
  }
  return std::nullopt;
}

int run_store_until_signal(const StoreServerOptions& opts, std::ostream& out) {
  raise_fd_limit();
  boost::asio::io_context io(1);  // one thread runs it: lets Asio skip internal locking
  try {
    StoreServer server(io, opts);
    // Handlers first, port second: whoever reads the port may signal us right away.
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    server.start();
    out << server.port() << std::endl;  // first line: the port clients should use
    signals.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      server.stop();
      io.stop();
    });
    io.run();
  } catch (const StoreBindError& e) {
    std::cerr << "ddprun-store: " << e.what();
    if (opts.port != 0) std::cerr << " (use --port 0 to let the system pick a free port)";
    std::cerr << '\n';
    return exit_codes::kFailure;
  }
  return exit_codes::kSuccess;
}

}  // namespace ddp::rdzv
