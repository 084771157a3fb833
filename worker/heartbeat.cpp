// SPDX-License-Identifier: MIT
// A plain sendto(2) on a non-blocking AF_UNIX datagram socket: a training loop has no event loop
// to drive, and the installed worker library must not make its users depend on Boost.
#include "ddprun/worker/heartbeat.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace ddp::worker {

Heartbeat Heartbeat::from_environment() {
  const char* path = std::getenv("DDPRUN_HEARTBEAT_SOCKET");
  return Heartbeat(path ? path : "");
}

Heartbeat::Heartbeat(std::string socket_path) : path_(std::move(socket_path)) {
  if (path_.empty()) return;
  if (path_.size() >= sizeof(sockaddr_un::sun_path)) {
    failed(ENAMETOOLONG);
    return;
  }
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) failed(errno);
}

Heartbeat::~Heartbeat() {
  if (fd_ >= 0) ::close(fd_);
}

Heartbeat::Heartbeat(Heartbeat&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      sent_(other.sent_),
      noticed_(other.noticed_) {}

Heartbeat& Heartbeat::operator=(Heartbeat&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    sent_ = other.sent_;
    noticed_ = other.noticed_;
  }
  return *this;
}

void Heartbeat::step(std::int64_t step) {
  if (fd_ < 0) return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path_.data(), path_.size());
  char text[32];
  const int length = std::snprintf(text, sizeof text, "step %lld", static_cast<long long>(step));
  const ssize_t n = ::sendto(fd_, text, static_cast<size_t>(length), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&address), sizeof address);
  if (n == length) {
    ++sent_;
  } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    // ddprun's queue is full (net.unix.max_dgram_qlen): this heartbeat is dropped, the next
    // one will do. Not an error worth a line.
  } else {
    failed(n < 0 ? errno : EMSGSIZE);
  }
}

void Heartbeat::failed(int error) {
  if (noticed_) return;
  noticed_ = true;
  std::fprintf(stderr, "worker: heartbeat to %s failed (%s); further failures are not reported\n",
               path_.c_str(), std::strerror(error));
}

}  // namespace ddp::worker
