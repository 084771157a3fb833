#pragma once

// Blocking TCPStore client speaking the torch 2.x (G2) dialect, for ddprun's agents and the
// worker template. Safe to share between threads (one request at a time per client object).
//
// Keys are namespaced like c10d::TCPStore: `key_prefix` ("/" by default) is prepended on the
// wire, so client.get("k") sees what a PyTorch client stored with store.set("k", ...).

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/blocking_socket.hpp"
#include "rendezvous/store_errors.hpp"

namespace ddp::rdzv {

struct StoreClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string key_prefix = "/";
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // default per-call timeout
  std::chrono::milliseconds initial_backoff{10};
  std::chrono::milliseconds max_backoff{1000};
  // Give up early when every attempt for this long was refused (nothing listens on the port: the
  // store's host failed to start it or has exited), instead of retrying until connect_timeout.
  // Zero: retry refusals like any other failure.
  std::chrono::milliseconds refused_timeout{0};
  std::size_t max_value_bytes = std::size_t{1} << 30;  // refuse replies larger than this
  // Runs on every fresh connection after VALIDATE + PING, before any request (ddprun's agents
  // prove the job's token here: rendezvous/token_auth.hpp). A StoreAuthError it throws ends the
  // connect at once; any other StoreError is retried like a failed connect.
  std::function<void(BlockingSocket&, BlockingSocket::Clock::time_point)> after_connect;
};

class StoreClient {
 public:
  using Duration = std::chrono::milliseconds;

  // Connects now (retrying with exponential backoff until connect_timeout); throws
  // StoreConnectError naming host:port and the last OS error.
  explicit StoreClient(StoreClientOptions options);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set_timeout(Duration timeout);
  Duration timeout() const;

  void set(const std::string& key, const std::string& value);
  // Waits for the key (up to the call timeout), then reads it.
  std::string get(const std::string& key);
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Returns the value now stored, or the current value when `expected` did not match.
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool check(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, Duration timeout);
  std::vector<std::string> multi_get(const std::vector<std::string>& keys);
  // multi_get of values that should be small (another agent's record): a value over max_bytes
  // is not transferred (the connection is dropped after its length and reopened by the next
  // call); `too_large` is its index and the values from there on are nullopt (not read).
  struct BoundedValues {
    std::vector<std::optional<std::string>> values;
    std::optional<std::size_t> too_large;
  };
  BoundedValues multi_get_bounded(const std::vector<std::string>& keys, std::size_t max_bytes);
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values);
  void append(const std::string& key, const std::string& value);
  bool delete_key(const std::string& key);
  std::int64_t num_keys();
  std::vector<std::string> list_keys();  // only keys under key_prefix, with the prefix removed
  void queue_push(const std::string& queue, const std::string& item);
  // Non-blocking pop returns nullopt on an empty queue; blocking pop waits up to the timeout.
  std::optional<std::string> queue_pop(const std::string& queue, bool block = false);
  std::int64_t queue_len(const std::string& queue);
  // Every caller increments `key`; returns once `world_size` callers arrived (or times out).
  void barrier(const std::string& key, std::int64_t world_size);

  const StoreClientOptions& options() const { return options_; }

 private:
  using Deadline = BlockingSocket::Clock::time_point;

  std::string wire_key(const std::string& key) const { return options_.key_prefix + key; }
  std::vector<std::string> wire_keys(const std::vector<std::string>& keys) const;
  Deadline deadline_after(Duration d) const { return BlockingSocket::Clock::now() + d; }
  BlockingSocket& connected_socket();  // (re)connects and validates when needed
  // Runs one request/reply exchange under the lock. A broken connection is dropped; for
  // idempotent requests one reconnect-and-retry follows.
  template <typename Fn>
  auto call(bool idempotent, Fn&& fn);
  // Sends `request` (WAIT or BARRIER) and reads STOP_WAITING, cancelling on timeout.
  void await_stop_waiting(BlockingSocket& sock, const std::string& request, Duration timeout,
                          const std::vector<std::string>& keys);

  StoreClientOptions options_;
  Duration timeout_;
  mutable std::mutex mutex_;
  BlockingSocket socket_;
};

}  // namespace ddp::rdzv
