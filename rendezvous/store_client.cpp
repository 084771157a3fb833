#include "rendezvous/store_client.hpp"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "rendezvous/codec.hpp"

namespace ddp::rdzv {
namespace {

constexpr Generation kGen = Generation::G2;

std::string request(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
                    std::int64_t number = 0) {
  Command cmd;
  cmd.op = op;
  cmd.keys = std::move(keys);
  cmd.values = std::move(values);
  cmd.number = number;
  return encode_request(kGen, cmd);
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// A PING nonce whose third byte is 0xFF: a torch 1.13 server parses VALIDATE+PING as a SET with
// a key length >= 2^63 and drops the connection at once instead of trying to allocate it.
std::uint32_t ping_nonce() {
  return 0x00FF0000u | (static_cast<std::uint32_t>(::getpid()) & 0xFFFFu);
}

}  // namespace

StoreClient::StoreClient(StoreClientOptions options)
    : options_(std::move(options)), timeout_(options_.timeout) {
  std::lock_guard lock(mutex_);
  connected_socket();
}

StoreClient::~StoreClient() = default;

void StoreClient::set_timeout(Duration timeout) {
  std::lock_guard lock(mutex_);
  timeout_ = timeout;
}

StoreClient::Duration StoreClient::timeout() const {
  std::lock_guard lock(mutex_);
  return timeout_;
}

std::vector<std::string> StoreClient::wire_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(wire_key(k));
  return out;
}

BlockingSocket& StoreClient::connected_socket() {
  if (!socket_.broken()) return socket_;
  const auto deadline = deadline_after(options_.connect_timeout);
  auto backoff = options_.initial_backoff;
  std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
  std::string last_error = "no attempt made";
  // The start of a run of refusals; a plain time_point (not std::optional) because GCC 12 reports a
  // false -Wmaybe-uninitialized on the optional's value at -O3.
  bool refusing = false;
  BlockingSocket::Clock::time_point refused_since{};
  for (;;) {
    try {
      BlockingSocket sock = BlockingSocket::connect(options_.host, options_.port, deadline);
      const std::uint32_t nonce = ping_nonce();
      Command validate{Op::Validate, {}, {}, 0, kValidateMagic};
      Command ping{Op::Ping, {}, {}, 0, nonce};
      sock.send_all(encode_request(kGen, validate) + encode_request(kGen, ping), deadline);
      const std::uint32_t echo = sock.recv_u32(deadline);
      if (echo != nonce)
        throw StoreError(
            fmt::format("store answered PING with {:#x} instead of {:#x}", echo, nonce));
      if (options_.after_connect) options_.after_connect(sock, deadline);
      socket_ = std::move(sock);
      return socket_;
    } catch (const StoreAuthError& e) {
      throw StoreAuthError(
          fmt::format("store at {}:{}: {}", options_.host, options_.port, e.what()));
    } catch (const StoreRefusedError& e) {
      last_error = e.what();
      const auto now = BlockingSocket::Clock::now();
      if (!refusing) refused_since = now;
      refusing = true;
      if (options_.refused_timeout > Duration::zero() &&
          now - refused_since >= options_.refused_timeout) {
        throw StoreConnectError(
            fmt::format("the store at {}:{} refused every connection for {} ms: nothing listens "
                        "there (the store's node "
                        "failed to open the port, e.g. another job holds it, or has exited)",
                        options_.host, options_.port, options_.refused_timeout.count()));
      }
    } catch (const StoreError& e) {
      last_error = e.what();
      refusing = false;
    }
    // Exponential backoff with jitter so many agents restarting together do not reconnect in
    // step. No attempt starts at the deadline itself: it could only time out and hide the
    // reason the earlier attempts failed.
    const auto sleep = backoff + Duration(jitter() % (backoff.count() + 1));
    if (BlockingSocket::Clock::now() + sleep >= deadline) break;
    std::this_thread::sleep_for(sleep);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  throw StoreConnectError(fmt::format("cannot reach the store at {}:{} within {} ms: {}",
                                      options_.host, options_.port,
                                      options_.connect_timeout.count(), last_error));
}

template <typename Fn>
auto StoreClient::call(bool idempotent, Fn&& fn) {
  std::lock_guard lock(mutex_);
  for (int attempt = 0;; ++attempt) {
    BlockingSocket& sock = connected_socket();
    try {
      return fn(sock);
    } catch (const StoreTimeoutError&) {
      throw;  // the request may have taken effect; the caller decides
    } catch (const StoreError&) {
      if (!sock.broken() || !idempotent || attempt > 0) throw;
      // The server restarted or the connection dropped: reconnect and repeat once.
    }
  }
}

void StoreClient::await_stop_waiting(BlockingSocket& sock, const std::string& req, Duration timeout,
                                     const std::vector<std::string>& keys) {
  sock.send_all(req, deadline_after(timeout_));
  if (sock.wait_readable(deadline_after(timeout))) {
    const std::uint8_t reply = sock.recv_u8(deadline_after(timeout_));
    if (reply != kStopWaiting) throw StoreError(fmt::format("unexpected wait reply {:#x}", reply));
    return;
  }
  // Timed out: cancel so the server forgets us. A STOP_WAITING that raced the cancel arrives
  // first and means the wait did complete.
  sock.send_all(request(Op::CancelWait), deadline_after(timeout_));
  std::uint8_t reply = sock.recv_u8(deadline_after(timeout_));
  bool completed = false;
  if (reply == kStopWaiting) {
    completed = true;
    reply = sock.recv_u8(deadline_after(timeout_));
  }
  if (reply != kWaitCanceled) throw StoreError(fmt::format("unexpected cancel reply {:#x}", reply));
  if (!completed) {
    throw StoreTimeoutError(
        fmt::format("wait timed out after {} ms for keys: {}", timeout.count(), join_keys(keys)));
  }
}

void StoreClient::set(const std::string& key, const std::string& value) {
  const std::string req = request(Op::Set, {wire_key(key)}, {value});
  call(true, [&](BlockingSocket& s) { s.send_all(req, deadline_after(timeout_)); });
}

std::string StoreClient::get(const std::string& key) {
  const std::vector<std::string> keys{wire_key(key)};
  const std::string wait_req = request(Op::Wait, keys);
  const std::string get_req = request(Op::Get, keys);
  return call(true, [&](BlockingSocket& s) {
    await_stop_waiting(s, wait_req, timeout_, {key});
    s.send_all(get_req, deadline_after(timeout_));
    return s.recv_bytes(deadline_after(timeout_), options_.max_value_bytes);
  });
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  const std::string req = request(Op::Add, {wire_key(key)}, {}, delta);
  return call(false, [&](BlockingSocket& s) {
    s.send_all(req, deadline_after(timeout_));
    return s.recv_i64(deadline_after(timeout_));
  });
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  const std::string req = request(Op::CompareSet, {wire_key(key)}, {expected, desired});
  return call(false, [&](BlockingSocket& s) {
    s.send_all(req, deadline_after(timeout_));
    return s.recv_bytes(deadline_after(timeout_), options_.max_value_bytes);
  });
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  const std::string req = request(Op::Check, wire_keys(keys));
  return call(true, [&](BlockingSocket& s) {
    s.send_all(req, deadline_after(timeout_));
    return s.recv_u8(deadline_after(timeout_)) == kCheckReady;
  });
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

void StoreClient::wait(const std::vector<std::string>& keys, Duration timeout) {
  const std::string req = request(Op::Wait, wire_keys(keys));
  call(true, [&](BlockingSocket& s) { await_stop_waiting(s, req, timeout, keys); });
}

std::vector<std::string> StoreClient::multi_get(const std::vector<std::string>& keys) {
  const auto wk = wire_keys(keys);
  const std::string wait_req = request(Op::Wait, wk);
  const std::string get_req = request(Op::MultiGet, wk);
  return call(true, [&](BlockingSocket& s) {
    await_stop_waiting(s, wait_req, timeout_, keys);
    s.send_all(get_req, deadline_after(timeout_));
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      values.push_back(s.recv_bytes(deadline_after(timeout_), options_.max_value_bytes));
    }
    return values;
  });
}

StoreClient::BoundedValues StoreClient::multi_get_bounded(const std::vector<std::string>& keys,
                                                          std::size_t max_bytes) {
  const auto wk = wire_keys(keys);
  const std::string wait_req = request(Op::Wait, wk);
  const std::string get_req = request(Op::MultiGet, wk);
  return call(true, [&](BlockingSocket& s) {
    await_stop_waiting(s, wait_req, timeout_, keys);
    s.send_all(get_req, deadline_after(timeout_));
    BoundedValues out;
    out.values.resize(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      out.values[i] = s.recv_bytes_at_most(deadline_after(timeout_),
                                           std::min(max_bytes, options_.max_value_bytes));
      if (!out.values[i]) {
        out.too_large = i;
        break;
      }
    }
    return out;
  });
}

void StoreClient::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    throw std::invalid_argument("multi_set: keys and values differ in length");
  const std::string req = request(Op::MultiSet, wire_keys(keys), values);
  call(true, [&](BlockingSocket& s) { s.send_all(req, deadline_after(timeout_)); });
}

void StoreClient::append(const std::string& key, const std::string& value) {
  const std::string req = request(Op::Append, {wire_key(key)}, {value});
  call(false, [&](BlockingSocket& s) { s.send_all(req, deadline_after(timeout_)); });
}

bool StoreClient::delete_key(const std::string& key) {
  const std::string req = request(Op::DeleteKey, {wire_key(key)});
  return call(true, [&](BlockingSocket& s) {
    s.send_all(req, deadline_after(timeout_));
    return s.recv_i64(deadline_after(timeout_)) == 1;
  });
}

std::int64_t StoreClient::num_keys() {
  const std::string req = request(Op::GetNumKeys);
  return call(true, [&](BlockingSocket& s) {
    s.send_all(req, deadline_after(timeout_));
    return s.recv_i64(deadline_after(timeout_));
  });
}

std::vector<std::string> StoreClient::list_keys() {
  const std::string req = request(Op::ListKeys);
  return call(true, [&](BlockingSocket& s) {
    s.send_all(req, deadline_after(timeout_));
    const std::int64_t n = s.recv_i64(deadline_after(timeout_));
    if (n < 0) throw StoreError(fmt::format("store sent a negative key count {}", n));
    std::vector<std::string> keys;
    for (std::int64_t i = 0; i < n; ++i) {
      std::string key = s.recv_bytes(deadline_after(timeout_), options_.max_value_bytes);
      if (key.starts_with(options_.key_prefix))
        keys.push_back(key.substr(options_.key_prefix.size()));
    }
    return keys;
  });
}

void StoreClient::queue_push(const std::string& queue, const std::string& item) {
  const std::string req = request(Op::QueuePush, {wire_key(queue)}, {item});
  call(false, [&](BlockingSocket& s) { s.send_all(req, deadline_after(timeout_)); });
}

std::optional<std::string> StoreClient::queue_pop(const std::string& queue, bool block) {
  const std::vector<std::string> keys{wire_key(queue)};
  const std::string wait_req = request(Op::Wait, keys);
  const std::string pop_req = request(Op::QueuePop, keys);
  return call(false, [&](BlockingSocket& s) -> std::optional<std::string> {
    const auto deadline = deadline_after(timeout_);
    for (;;) {
      if (block) {
        const auto left =
            std::chrono::duration_cast<Duration>(deadline - BlockingSocket::Clock::now());
        await_stop_waiting(s, wait_req, std::max(left, Duration(0)), {queue});
      }
      s.send_all(pop_req, deadline_after(timeout_));
      if (s.recv_i64(deadline_after(timeout_)) > 0)
        return s.recv_bytes(deadline_after(timeout_), options_.max_value_bytes);
      if (!block) return std::nullopt;
      // Another consumer took the item between the wake-up and our pop: wait again.
    }
  });
}

std::int64_t StoreClient::queue_len(const std::string& queue) {
  const std::string req = request(Op::QueueLen, {wire_key(queue)});
  return call(true, [&](BlockingSocket& s) {
    s.send_all(req, deadline_after(timeout_));
    return s.recv_i64(deadline_after(timeout_));
  });
}

void StoreClient::barrier(const std::string& key, std::int64_t world_size) {
  const std::string req = request(Op::Barrier, {wire_key(key)}, {}, world_size);
  call(false, [&](BlockingSocket& s) { await_stop_waiting(s, req, timeout_, {key}); });
}

}  // namespace ddp::rdzv
