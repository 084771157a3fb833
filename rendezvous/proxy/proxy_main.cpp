// ddprun-store-proxy: the node-local store proxy on its own (ddprun's agents run the same code
// in-process with --store-proxy). Checks that the root takes ddprun's tagged mode (else one line
// saying to connect the workers to the root directly, exit 69), prints the port it listens on as
// the first line of stdout, serves until SIGINT/SIGTERM, then prints one line of counters on
// stderr.

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <iostream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "common/exit_codes.hpp"
#include "rendezvous/proxy/store_proxy.hpp"

namespace {

namespace proxy = ddp::rdzv::proxy;

// The command line; --idle-timeout is read in seconds into `idle_timeout_s`.
void add_options(CLI::App& app, proxy::StoreProxyOptions& opts, std::string& upstream,
                 double& idle_timeout_s) {
  app.set_version_flag("--version", "ddprun-store-proxy " DDPRUN_VERSION);
  app.add_option("--upstream", upstream, "the root store, HOST:PORT")->required();
  app.add_option("--host", opts.bind_address, "address to listen on")->capture_default_str();
  app.add_option("--port", opts.port, "port to listen on; 0 picks a free one (printed on stdout)")
      ->capture_default_str();
  app.add_option("--max-pending-output-bytes", opts.limits.max_pending_output_bytes,
                 "output owed to one worker connection that does not read it")
      ->capture_default_str();
  app.add_option("--max-request-bytes", opts.limits.max_request_bytes, "largest single request")
      ->capture_default_str();
  app.add_option("--max-connections", opts.limits.max_connections, "most worker connections")
      ->capture_default_str();
  app.add_option("--max-watched-keys", opts.max_watched_keys,
                 "keys watched at once on the link to the root (every WAIT's keys)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-barrier-links", opts.max_barrier_links,
                 "BARRIERs in flight at once (each holds a root connection)")
      ->capture_default_str();
  app.add_option("--idle-timeout", idle_timeout_s,
                 "seconds a worker connection in the middle of a request or owed output may make "
                 "no progress; 0: never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

// HOST:PORT into opts; false (after one line on stderr) when it is not one.
bool parse_upstream(const std::string& upstream, proxy::StoreProxyOptions& opts) {
  const auto colon = upstream.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    std::cerr << "ddprun-store-proxy: --upstream must be HOST:PORT, got '" << upstream << "'\n";
    return false;
  }
  opts.upstream_host = upstream.substr(0, colon);
  try {
    const long port = std::stol(upstream.substr(colon + 1));
    if (port <= 0 || port > 65535) throw std::out_of_range("port");
    opts.upstream_port = static_cast<std::uint16_t>(port);
  } catch (const std::exception&) {
    std::cerr << "ddprun-store-proxy: bad port in --upstream '" << upstream << "'\n";
    return false;
  }
  return true;
}

// The root must take ddprun's tagged mode; otherwise one line and exit 69.
int check_root(const std::string& upstream, const proxy::StoreProxyOptions& opts) {
  try {
    if (auto why = proxy::tagged_mode_refusal(opts.upstream_host, opts.upstream_port,
                                              std::chrono::seconds(10))) {
      std::cerr << fmt::format(
          "ddprun-store-proxy: the root store {} does not take ddprun's tagged mode ({}): "
          "connect the workers to it directly\n",
          upstream, *why);
      return ddp::exit_codes::kUnavailable;
    }
  } catch (const std::runtime_error& e) {
    std::cerr << "ddprun-store-proxy: " << e.what() << '\n';
    return ddp::exit_codes::kUnavailable;
  }
  return ddp::exit_codes::kSuccess;
}

// Serves until SIGINT or SIGTERM, then prints the counters on stderr.
int serve(const proxy::StoreProxyOptions& opts) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  boost::asio::io_context io(1);
  try {
    proxy::StoreProxy store_proxy(io, opts);
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    std::cout << store_proxy.port() << std::endl;
    store_proxy.start();
    signals.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      const auto s = store_proxy.stats();
      std::cerr << fmt::format(
          "ddprun-store-proxy: stats downstream_requests={} upstream_requests={} "
          "upstream_connections_opened={} "
          "coalesced_requests={} watch_waits={} tagged_main_links={} unwatched_keys={} "
          "refused_requests={} accept_errors={}\n",
          s.downstream_requests, s.upstream_requests, s.upstream_connections_opened,
          s.coalesced_requests, s.watch_waits, s.tagged_main_links, s.unwatched_keys,
          s.refused_requests, s.accept_errors);
      store_proxy.stop();
      io.stop();
    });
    io.run();
  } catch (const std::runtime_error& e) {
    std::cerr << "ddprun-store-proxy: " << e.what() << '\n';
    return ddp::exit_codes::kFailure;
  }
  return ddp::exit_codes::kSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  proxy::StoreProxyOptions opts;
  std::string upstream;
  CLI::App app{"ddprun-store-proxy: a node-local proxy in front of a c10d-compatible TCP store",
               "ddprun-store-proxy"};
  double idle_timeout_s = std::chrono::duration<double>(opts.limits.idle_timeout).count();
  add_options(app, opts, upstream, idle_timeout_s);
  CLI11_PARSE(app, argc, argv);
  opts.limits.idle_timeout =
      std::chrono::milliseconds(static_cast<long long>(idle_timeout_s * 1000));
  if (!parse_upstream(upstream, opts)) return ddp::exit_codes::kUsage;
  if (const int refused = check_root(upstream, opts); refused != ddp::exit_codes::kSuccess)
    return refused;
  return serve(opts);
}
