#include "rendezvous/blocking_socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "rendezvous/codec.hpp"
#include "rendezvous/store_errors.hpp"

namespace ddp::rdzv {
namespace {

int remaining_ms(BlockingSocket::Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - BlockingSocket::Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left.count());
}

// poll() that survives EINTR; returns revents, 0 on timeout.
short poll_one(int fd, short events, BlockingSocket::Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return p.revents;
    if (rc == 0) return 0;
    if (errno != EINTR) return POLLERR;
  }
}

std::string errno_text(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

// Non-blocking connect to one address, bounded by the deadline. Returns fd or -1 with `err` set.
int connect_one(const addrinfo& ai, BlockingSocket::Clock::time_point deadline, int& err) {
  const int fd =
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0 && errno != EINPROGRESS) {
    err = errno;
    ::close(fd);
    return -1;
  }
  const short revents = poll_one(fd, POLLOUT, deadline);
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (revents == 0) {
    so_error = ETIMEDOUT;
  } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
    so_error = errno;
  }
  if (so_error != 0) {
    err = so_error;
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

BlockingSocket BlockingSocket::connect(const std::string& host, std::uint16_t port,
                                       Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    throw StoreError(fmt::format("cannot resolve {}: {}", host, ::gai_strerror(rc)));
  }
  int err = ECONNREFUSED;
  int fd = -1;
  for (const addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next)
    fd = connect_one(*ai, deadline, err);
  ::freeaddrinfo(list);
  if (fd < 0) {
    const std::string what =
        fmt::format("cannot connect to {}:{}: {}", host, port, errno_text(err));
    if (err == ECONNREFUSED) throw StoreRefusedError(what);
    throw StoreError(what);
  }
  return BlockingSocket(fd);
}

BlockingSocket::~BlockingSocket() { close(); }

BlockingSocket::BlockingSocket(BlockingSocket&& other) noexcept
    : fd_(other.fd_), broken_(other.broken_) {
  other.fd_ = -1;
}

BlockingSocket& BlockingSocket::operator=(BlockingSocket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    broken_ = other.broken_;
    other.fd_ = -1;
  }
  return *this;
}

void BlockingSocket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void BlockingSocket::fail(const std::string& what) {
  broken_ = true;
  throw StoreError(what);
}

void BlockingSocket::fail_timeout(const std::string& what) {
  broken_ = true;
  throw StoreTimeoutError(what);
}

void BlockingSocket::send_all(std::string_view bytes, Clock::time_point deadline) {
  if (broken()) fail("store connection is closed");
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (poll_one(fd_, POLLOUT, deadline) == 0) fail_timeout("timed out sending to the store");
      continue;
    }
    fail(fmt::format("store connection lost while sending: {}", errno_text(errno)));
  }
}

void BlockingSocket::recv_exact(char* dst, std::size_t n, Clock::time_point deadline) {
  if (broken()) fail("store connection is closed");
  while (n > 0) {
    const ssize_t got = ::recv(fd_, dst, n, 0);
    if (got > 0) {
      dst += got;
      n -= static_cast<std::size_t>(got);
      continue;
    }
    if (got == 0) fail("store closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (poll_one(fd_, POLLIN, deadline) == 0)
        fail_timeout("timed out waiting for the store's reply");
      continue;
    }
    fail(fmt::format("store connection lost while receiving: {}", errno_text(errno)));
  }
}

std::uint8_t BlockingSocket::recv_u8(Clock::time_point deadline) {
  char c = 0;
  recv_exact(&c, 1, deadline);
  return static_cast<std::uint8_t>(c);
}

std::int64_t BlockingSocket::recv_i64(Clock::time_point deadline) {
  char b[8];
  recv_exact(b, 8, deadline);
  return get_i64(b);
}

std::uint32_t BlockingSocket::recv_u32(Clock::time_point deadline) {
  char b[4];
  recv_exact(b, 4, deadline);
  return get_u32(b);
}

std::string BlockingSocket::recv_bytes(Clock::time_point deadline, std::size_t max_bytes) {
  char b[8];
  recv_exact(b, 8, deadline);
  const std::uint64_t len = get_u64(b);
  if (len > max_bytes)
    fail(fmt::format("store sent a {}-byte value, more than the {} allowed", len, max_bytes));
  std::string value(static_cast<std::size_t>(len), '\0');
  recv_exact(value.data(), value.size(), deadline);
  return value;
}

std::optional<std::string> BlockingSocket::recv_bytes_at_most(Clock::time_point deadline,
                                                              std::size_t max_bytes) {
  char b[8];
  recv_exact(b, 8, deadline);
  const std::uint64_t len = get_u64(b);
  if (len > max_bytes) {
    close();  // not read: the next call reconnects
    return std::nullopt;
  }
  std::string value(static_cast<std::size_t>(len), '\0');
  recv_exact(value.data(), value.size(), deadline);
  return value;
}

bool BlockingSocket::wait_readable(Clock::time_point deadline) {
  if (broken()) fail("store connection is closed");
  return poll_one(fd_, POLLIN, deadline) != 0;
}

}  // namespace ddp::rdzv
