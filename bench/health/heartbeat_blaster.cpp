// SPDX-License-Identifier: MIT
// Benchmark worker: sends N "step <i>" datagrams to $DDPRUN_HEARTBEAT_SOCKET as fast as the
// agent takes them (blocking sends: none is lost), prints "sent N", then sleeps HOLD seconds so
// that the benchmark can read the agent's CPU time while every worker is still alive.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 100000;
  double hold = argc > 2 ? std::atof(argv[2]) : 1.0;
  const char* path = std::getenv("DDPRUN_HEARTBEAT_SOCKET");
  if (!path) {
    std::fprintf(stderr, "DDPRUN_HEARTBEAT_SOCKET is not set\n");
    return 2;
  }
  int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("connect");
    return 1;
  }
  char buf[32];
  for (long i = 1; i <= n; ++i) {
    int len = std::snprintf(buf, sizeof buf, "step %ld", i);
    if (::send(fd, buf, static_cast<size_t>(len), 0) < 0) {
      std::perror("send");
      return 1;
    }
  }
  std::printf("sent %ld\n", n);
  std::fflush(stdout);
  ::usleep(static_cast<useconds_t>(hold * 1e6));
  return 0;
}
