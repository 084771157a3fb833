#include "launcher/scheduler/resolve_master.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "launcher/scheduler/run_command.hpp"
#include "launcher/scheduler/slurm_node_addr.hpp"

namespace ddp::launcher::scheduler {
namespace {

std::optional<std::string> blocking_lookup(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0 || list == nullptr)
    return std::nullopt;
  std::optional<std::string> v4;
  std::optional<std::string> v6;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET && !v4) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, text, sizeof text);
      v4 = text;
    } else if (ai->ai_family == AF_INET6 && !v6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, text,
                sizeof text);
      v6 = text;
    }
  }
  freeaddrinfo(list);
  return v4 ? v4 : v6;
}

// Shared between the caller and a lookup thread that may outlive it.
struct Lookup {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<std::string> address;
};

}  // namespace

std::optional<std::string> resolve_dns(const std::string& host, std::chrono::milliseconds timeout) {
  if (host.empty()) return std::nullopt;
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host] {
    auto address = blocking_lookup(host);
    std::lock_guard lock(lookup->mutex);
    lookup->address = std::move(address);
    lookup->done = true;
    lookup->done_cv.notify_all();
  }).detach();
  std::unique_lock lock(lookup->mutex);
  if (!lookup->done_cv.wait_for(lock, timeout, [&] { return lookup->done; })) return std::nullopt;
  return lookup->address;
}

std::optional<std::string> query_slurm_node_addr(const std::string& name,
                                                 const ResolveOptions& options) {
  CommandResult result =
      run_command({options.scontrol, "-o", "show", "node", name}, options.timeout);
  if (result.timed_out) {
    throw SchedulerError(fmt::format("`{} -o show node {}` did not answer within {} ms",
                                     options.scontrol, name, options.timeout.count()));
  }
  if (result.exit_code != 0) return std::nullopt;
  return parse_scontrol_node_addr(result.output);
}

HostResolution resolve_master_host(const std::string& host, const ResolveOptions& options) {
  if (auto address = resolve_dns(host, options.timeout)) return {host, *address, "DNS"};
  if (!options.ask_slurm) {
    throw SchedulerError(fmt::format("master host '{}' does not resolve (DNS)", host));
  }
  auto node_addr = query_slurm_node_addr(host, options);
  if (!node_addr) {
    throw SchedulerError(fmt::format(
        "master host '{}' does not resolve (DNS) and `{} show node {}` gives no NodeAddr", host,
        options.scontrol, host));
  }
  std::string how = fmt::format("Slurm NodeAddr ({} show node {})", options.scontrol, host);
  if (auto address = resolve_dns(*node_addr, options.timeout)) return {host, *address, how};
  throw SchedulerError(
      fmt::format("master host '{}': Slurm's NodeAddr '{}' does not resolve", host, *node_addr));
}

}  // namespace ddp::launcher::scheduler
