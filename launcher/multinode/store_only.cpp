// SPDX-License-Identifier: MIT
#include "launcher/multinode/store_only.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <string_view>

#include "launcher/common/exit_codes.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "rendezvous/store_runner.hpp"

namespace ddp::launcher {

bool wants_store_only(int argc, char** argv) {
  // --store-only takes no program, so it is the first word or among ddprun's leading options;
  // a program's own "--store-only" comes after the program's name, which is not an option.
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--store-only" || arg == "--store_only") return true;
    if (arg == "--") return false;
  }
  return false;
}

int run_store_only(int argc, char** argv) {
  CLI::App app{"ddprun --store-only: serve the job's TCP store until SIGINT/SIGTERM", "ddprun"};
  std::string addr = "127.0.0.1";
  int port = 29500;
  bool store_only = false;
  app.add_flag("--store-only,--store_only", store_only, "Run only the store");
  app.add_option("--master-addr,--master_addr", addr, "Address to listen on (default 127.0.0.1)");
  app.add_option("--master-port,--master_port", port, "Port (default 29500; 0: a free port)")
      ->check(CLI::Range(0, 65535));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return exit_codes::kSuccess;
  } catch (const CLI::ParseError& e) {
    std::cerr << fmt::format("ddprun: --store-only: {}\n", e.what());
    return exit_codes::kUsage;
  }
  rdzv::StoreServerOptions options;
  options.bind_address = listen_address_for(addr);
  options.port = static_cast<std::uint16_t>(port);
  int code = rdzv::run_store_until_signal(options, std::cout);
  return code == 1 ? multinode_exit_codes::kRendezvous : code;
}

}  // namespace ddp::launcher
