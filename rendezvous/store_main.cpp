// ddprun-store: the ddprun TCP store on its own (also reachable as `ddprun --store-only`).
// Prints the port it listens on as the first line of stdout, serves until SIGINT/SIGTERM.

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "common/exit_codes.hpp"
#include "rendezvous/store_runner.hpp"
#include "rendezvous/token_auth.hpp"

int main(int argc, char** argv) {
  // A reader of stdout/stderr that went away (`ddprun-store ... | head -1`) must not kill the
  // store: writes then fail with EPIPE, which the logger handles.
  ::signal(SIGPIPE, SIG_IGN);
  ddp::rdzv::StoreServerOptions opts;
  opts.port = 29500;
  CLI::App app{"ddprun-store: a c10d-compatible TCP store (torch 1.13 and 2.x clients)",
               "ddprun-store"};
  app.add_option("--host", opts.bind_address, "address to listen on")->capture_default_str();
  app.add_option("--port", opts.port, "port to listen on; 0 picks a free one (printed on stdout)")
      ->capture_default_str();
  app.add_option("--max-key-bytes", opts.limits.max_key_bytes, "largest key accepted")
      ->capture_default_str();
  app.add_option("--max-value-bytes", opts.limits.max_value_bytes, "largest value accepted")
      ->capture_default_str();
  app.add_option("--max-keys-per-request", opts.limits.max_keys_per_request,
                 "most keys in one CHECK/WAIT/MULTI_GET/MULTI_SET")
      ->capture_default_str();
  app.add_option("--max-request-bytes", opts.limits.max_request_bytes, "largest single request")
      ->capture_default_str();
  app.add_option("--max-connections", opts.limits.max_connections, "most concurrent connections")
      ->capture_default_str();
  app.add_option("--max-total-input-bytes", opts.limits.max_total_input_bytes,
                 "partly received requests of all connections together")
      ->capture_default_str();
  app.add_option("--max-pending-output-bytes", opts.limits.max_pending_output_bytes,
                 "output owed to one connection that does not read it")
      ->capture_default_str();
  app.add_option("--max-total-output-bytes", opts.limits.max_total_output_bytes,
                 "output owed to all connections together")
      ->capture_default_str();
  app.add_option("--max-reply-bytes", opts.limits.max_reply_bytes,
                 "largest single reply (MULTI_GET, LIST_KEYS)")
      ->capture_default_str();
  app.add_option("--max-keys", opts.limits.max_keys, "most keys (and queues) in the store")
      ->capture_default_str();
  app.add_option("--max-watches-per-connection", opts.limits.max_watches_per_connection,
                 "most keys one connection watches (WATCH_KEY)")
      ->capture_default_str();
  app.add_option("--max-watches", opts.limits.max_watches,
                 "most watch registrations of all connections together")
      ->capture_default_str();
  app.add_option(
         "--max-store-bytes", opts.limits.max_store_bytes,
         "most bytes the store holds: keys, values, queue items, WAIT and watch registrations")
      ->capture_default_str();
  double idle_timeout_s = std::chrono::duration<double>(opts.limits.idle_timeout).count();
  app.add_option("--idle-timeout", idle_timeout_s,
                 "seconds a connection in the middle of a request or owed output may make no "
                 "progress; 0: never")
      ->check(CLI::Range(0.0, 1e7))  // ~115 days; larger would overflow the milliseconds
      ->capture_default_str();
  app.add_flag("--trace", opts.trace, "log every request on stderr (protocol debugging)");
  app.set_version_flag("--version", "ddprun-store " DDPRUN_VERSION);
  // Usage errors exit 2 like ddprun's (CLI11's own codes are 100+); help and version exit 0.
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return ddp::exit_codes::kSuccess;
  } catch (const CLI::CallForVersion&) {
    std::cout << "ddprun-store " DDPRUN_VERSION "\n";
    return ddp::exit_codes::kSuccess;
  } catch (const CLI::ParseError& e) {
    std::cerr << "ddprun-store: " << e.what() << "\n";
    return ddp::exit_codes::kUsage;
  }
  opts.limits.idle_timeout =
      std::chrono::milliseconds(static_cast<long long>(idle_timeout_s * 1000));
  // The job's token (never a flag: the command line is visible to every user of the machine).
  if (const char* token = std::getenv("DDPRUN_RDZV_TOKEN"); token != nullptr && *token != '\0') {
    opts.access_policy = std::make_shared<ddp::rdzv::TokenAccessPolicy>(token);
  }

  return ddp::rdzv::run_store_until_signal(opts, std::cout);
}
