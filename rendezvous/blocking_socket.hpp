#pragma once

// A connected TCP socket with deadline-bounded blocking send/receive (poll + non-blocking I/O),
// used by StoreClient. Any failure or timeout marks the socket broken: the byte stream is then
// out of step with the protocol and the socket must be replaced.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddp::rdzv {

class BlockingSocket {
 public:
  using Clock = std::chrono::steady_clock;

  // One connection attempt to every address `host` resolves to, bounded by `deadline`.
  // Throws StoreError with the OS reason.
  static BlockingSocket connect(const std::string& host, std::uint16_t port,
                                Clock::time_point deadline);

  BlockingSocket() = default;
  ~BlockingSocket();
  BlockingSocket(BlockingSocket&& other) noexcept;
  BlockingSocket& operator=(BlockingSocket&& other) noexcept;

  // Throw StoreTimeoutError at the deadline, StoreError on a closed or failed connection.
  void send_all(std::string_view bytes, Clock::time_point deadline);
  void recv_exact(char* dst, std::size_t n, Clock::time_point deadline);
  std::uint8_t recv_u8(Clock::time_point deadline);
  std::int64_t recv_i64(Clock::time_point deadline);
  std::uint32_t recv_u32(Clock::time_point deadline);
  std::string recv_bytes(Clock::time_point deadline, std::size_t max_bytes);
  // A value of at most max_bytes; a longer one is not read: the connection is closed instead
  // (the stream cannot go on without its bytes) and nullopt returned, nothing thrown.
  std::optional<std::string> recv_bytes_at_most(Clock::time_point deadline, std::size_t max_bytes);

  // true when data (or EOF) is readable before the deadline; does not break the socket.
  bool wait_readable(Clock::time_point deadline);

  bool broken() const { return broken_ || fd_ < 0; }

 private:
  explicit BlockingSocket(int fd) : fd_(fd) {}
  void close();
  [[noreturn]] void fail(const std::string& what);
  [[noreturn]] void fail_timeout(const std::string& what);

  int fd_ = -1;
  bool broken_ = false;
};

}  // namespace ddp::rdzv
