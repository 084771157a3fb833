// SPDX-License-Identifier: MIT
#include "launcher/health/heartbeat_socket.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/exit_codes.hpp"

namespace ddp::launcher::health {
namespace {
// Datagrams read per wake-up before yielding to the loop's other handlers.
constexpr int kMaxDatagramsPerWakeup = 4096;
constexpr size_t kMaxDatagram = 256;  // longer ones are truncated: still progress
}  // namespace

std::optional<long long> parse_heartbeat_step(std::string_view d) {
  while (!d.empty() && (d.back() == '\n' || d.back() == '\r' || d.back() == ' '))
    d.remove_suffix(1);
  if (!d.starts_with("step ")) return std::nullopt;
  d.remove_prefix(5);
  while (!d.empty() && d.front() == ' ') d.remove_prefix(1);
  long long value = 0;
  auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), value);
  if (ec != std::errc() || end != d.data() + d.size() || value < 0) return std::nullopt;
  return value;
}

HeartbeatSocket::HeartbeatSocket(boost::asio::io_context& io, Handler handler)
    : socket_(io), handler_(std::move(handler)) {}

HeartbeatSocket::~HeartbeatSocket() { close(); }

Result<Ok> HeartbeatSocket::open(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Error{exit_codes::kInternal,
                 fmt::format("heartbeat socket path too long ({} bytes): {}", path.size(), path)};
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Error{exit_codes::kInternal, fmt::format("heartbeat socket: {}", std::strerror(errno))};
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    return Error{exit_codes::kInternal,
                 fmt::format("cannot bind heartbeat socket '{}': {}", path, std::strerror(err))};
  }
  // A larger receive queue absorbs bursts between two wake-ups; best effort.
  int bytes = 1 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  socket_.assign(fd);
  path_ = path;
  arm();
  return Ok{};
}

void HeartbeatSocket::close() {
  if (!socket_.is_open()) return;
  boost::system::error_code ignored;
  socket_.close(ignored);
  ::unlink(path_.c_str());
}

void HeartbeatSocket::arm() {
  socket_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                     [this](const boost::system::error_code& ec) {
                       if (ec) return;  // closed
                       drain();
                       if (socket_.is_open()) arm();
                     });
}

void HeartbeatSocket::drain() {
  char buffer[kMaxDatagram];
  size_t count = 0;
  std::optional<long long> last_step;
  for (int i = 0; i < kMaxDatagramsPerWakeup; ++i) {
    ssize_t n = ::recv(socket_.native_handle(), buffer, sizeof(buffer), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // EAGAIN: drained
    }
    ++count;
    if (auto step = parse_heartbeat_step(std::string_view(buffer, static_cast<size_t>(n))))
      last_step = step;
  }
  if (count > 0) handler_(count, last_step);
}

}  // namespace ddp::launcher::health
