// SPDX-License-Identifier: MIT
#include "launcher/multinode/store_only.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <iostream>

#include "common/exit_codes.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "launcher/output/output_sink.hpp"
#include "rendezvous/store_runner.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/token_auth.hpp"

namespace ddp::launcher {
namespace {

constexpr int kDefaultStorePort = 29500;

int print_usage_error(const std::string& message) {
  write_fully(STDERR_FILENO, fmt::format("ddprun: --store-only: {}\n", message));
  return exit_codes::kUsage;
}

}  // namespace

int run_store_only(const RawOptions& raw) {
  // --store-only reads only the flags it names; PET_* and scheduler defaults are for launches.
  int port = kDefaultStorePort;
  if (!raw.master_port.empty()) {
    const auto& text = raw.master_port;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || end != text.data() + text.size() || port < 0 || port > 65535) {
      return print_usage_error(fmt::format("--master_port must be 0..65535, got '{}'", text));
    }
  }
  const std::string addr = raw.master_addr.empty() ? "127.0.0.1" : raw.master_addr;
  rdzv::StoreServerOptions options;
  options.bind_address = listen_address_for(addr);
  options.port = static_cast<std::uint16_t>(port);
  // With the job's token, only agents that prove it may touch the rendezvous keys.
  if (const char* token = std::getenv("DDPRUN_RDZV_TOKEN"); token != nullptr && *token != '\0') {
    options.access_policy = std::make_shared<rdzv::TokenAccessPolicy>(token);
  }
  const int code = rdzv::run_store_until_signal(options, std::cout);
  return code == exit_codes::kFailure ? exit_codes::kUnavailable : code;
}

}  // namespace ddp::launcher
