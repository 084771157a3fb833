// SPDX-License-Identifier: MIT
// The worker's heartbeat against a real Unix datagram socket.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "ddprun/worker/heartbeat.hpp"

using ddp::worker::Heartbeat;

namespace {

// A bound datagram socket in a fresh directory, as ddprun's agent makes one per local rank.
struct Receiver {
  std::string dir;
  std::string path;
  int fd = -1;
  Receiver() {
    char tmpl[] = "/tmp/ddprun-hb-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    path = dir + "/heartbeat-0.sock";
    fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), path.size());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Receiver() {
    ::close(fd);
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
  }
  std::string next() {
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    return n < 0 ? std::string("<none>") : std::string(buf, static_cast<size_t>(n));
  }
};

}  // namespace

TEST_CASE("heartbeat: one datagram 'step N' per call, to $DDPRUN_HEARTBEAT_SOCKET") {
  Receiver r;
  ::setenv("DDPRUN_HEARTBEAT_SOCKET", r.path.c_str(), 1);
  Heartbeat hb = Heartbeat::from_environment();
  ::unsetenv("DDPRUN_HEARTBEAT_SOCKET");
  REQUIRE(hb.enabled());
  hb.step(1);
  hb.step(12);
  hb.step(-3);
  CHECK(r.next() == "step 1");
  CHECK(r.next() == "step 12");
  CHECK(r.next() == "step -3");
  CHECK(r.next() == "<none>");
  CHECK(hb.sent() == 3);
  Heartbeat moved = std::move(hb);
  CHECK_FALSE(hb.enabled());
  moved.step(13);
  CHECK(r.next() == "step 13");
}

TEST_CASE("heartbeat: without the variable it does nothing") {
  ::unsetenv("DDPRUN_HEARTBEAT_SOCKET");
  Heartbeat hb = Heartbeat::from_environment();
  CHECK_FALSE(hb.enabled());
  hb.step(1);
  CHECK(hb.sent() == 0);
}

TEST_CASE("heartbeat: a full queue or a missing socket never blocks or throws") {
  {
    Receiver r;  // never read: the kernel queue fills up after max_dgram_qlen datagrams
    Heartbeat hb(r.path);
    for (int i = 0; i < 10000; ++i) hb.step(i);
    CHECK(hb.sent() > 0);
    CHECK(hb.sent() < 10000);
    CHECK(r.next() == "step 0");
  }
  Heartbeat gone("/tmp/ddprun-no-such-dir/heartbeat-0.sock");
  REQUIRE(gone.enabled());
  for (int i = 0; i < 100; ++i) gone.step(i);  // one notice on stderr, then silence
  CHECK(gone.sent() == 0);
  Heartbeat too_long(std::string(200, 'x'));
  CHECK_FALSE(too_long.enabled());
  too_long.step(1);
}
