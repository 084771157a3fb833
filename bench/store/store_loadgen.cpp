// Load generator for TCPStore servers (ddprun-store, torch 1.13's, torch 2.x's libuv), speaking
// the wire protocol directly from one epoll loop so the generator itself stays cheap.
//
//   store_loadgen throughput --port P --proto g1|g2 [--clients 64] [--seconds 5] [--value-bytes 64]
//                 [--pipeline 0|1]
//       closed loop per client: SET k (value) + GET k, then ADD counter; prints ops/s.
//       --pipeline 1 sends all three at once (one round trip, two replies, per cycle)
//   store_loadgen barrier --port P --proto g1|g2 --clients N [--source-ips 8] [--connect-window
//   1024]
//                 [--timeout 120]
//       N connections; each ADDs a barrier key, the last arrival SETs a release key, everyone
//       WAITs on it; prints connect time and time from the first ADD to the last release
//   --server-pid PID (either mode): also report the server's CPU time over the measured interval
// Output: one JSON object on stdout.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rendezvous/codec.hpp"

using namespace ddp::rdzv;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string mode;
  std::uint16_t port = 0;
  Generation gen = Generation::G2;
  int clients = 64;
  double seconds = 5;
  std::size_t value_bytes = 64;
  int source_ips = 8;
  int connect_window = 1024;  // connects in flight at once (the server's listen backlog is finite)
  double timeout = 120;
  bool pipeline = false;  // throughput: send SET, GET and ADD together (two replies per round trip)
  int server_pid = 0;     // if set: also report the server's CPU time over the measured interval
};

Args parse(int argc, char** argv) {
  if (argc < 2)
    throw std::runtime_error("usage: store_loadgen throughput|barrier --port P --proto g1|g2 ...");
  Args a;
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--port")
      a.port = static_cast<std::uint16_t>(std::stoi(v));
    else if (f == "--proto")
      a.gen = v == "g1" ? Generation::G1 : Generation::G2;
    else if (f == "--clients")
      a.clients = std::stoi(v);
    else if (f == "--seconds")
      a.seconds = std::stod(v);
    else if (f == "--value-bytes")
      a.value_bytes = std::stoul(v);
    else if (f == "--source-ips")
      a.source_ips = std::stoi(v);
    else if (f == "--timeout")
      a.timeout = std::stod(v);
    else if (f == "--connect-window")
      a.connect_window = std::stoi(v);
    else if (f == "--pipeline")
      a.pipeline = v == "1" || v == "on";
    else if (f == "--server-pid")
      a.server_pid = std::stoi(v);
    else
      throw std::runtime_error("unknown flag " + f);
  }
  if (a.port == 0) throw std::runtime_error("--port is required");
  return a;
}

struct Conn;
using Callback = void (*)(Conn&, std::string_view);

struct Conn {
  int fd = -1;
  int index = 0;
  bool connected = false;
  std::string out;
  std::size_t out_off = 0;
  std::string in;
  std::size_t expect = 0;       // reply bytes awaited (0 = none)
  Callback on_reply = nullptr;  // called with exactly `expect` bytes
  bool want_write = false;
};

class Loop {
 public:
  explicit Loop(const Args& args) : args_(args), ep_(::epoll_create1(EPOLL_CLOEXEC)) {}
  ~Loop() {
    for (auto& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
    ::close(ep_);
  }

  std::vector<Conn>& conns() { return conns_; }

  // Connect `n` sockets, at most `in_flight` handshakes at a time (the listen backlog is finite).
  void connect_all(int n, int in_flight, const std::function<void(Conn&)>& on_ready) {
    conns_.resize(static_cast<std::size_t>(n));
    int started = 0, ready = 0;
    auto start_one = [&] {
      Conn& c = conns_[static_cast<std::size_t>(started)];
      c.index = started++;
      open_socket(c);
    };
    auto ready_cb = [&](Conn& c) {
      ++ready;
      on_ready(c);
      if (started < n) start_one();
    };
    on_connected_ = ready_cb;
    while (started < n && started < in_flight) start_one();
    run_until([&] { return ready == n; });
  }

  // Queue `bytes` and send them now; `on_reply` gets the next `expect` reply bytes.
  void send(Conn& c, std::string_view bytes, std::size_t expect, Callback on_reply) {
    c.out.append(bytes);
    c.expect = expect;
    c.on_reply = on_reply;
    flush(c);
  }

  void run_until(const std::function<bool()>& done) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(args_.timeout);
    epoll_event events[256];
    while (!done()) {
      if (Clock::now() > deadline) throw std::runtime_error("timed out");
      const int n = ::epoll_wait(ep_, events, 256, 100);
      for (int i = 0; i < n; ++i) {
        Conn& c = conns_[events[i].data.u32];
        if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          if (!c.connected) throw std::runtime_error(fmt::format("connect {} failed", c.index));
          throw std::runtime_error(fmt::format("connection {} closed by the server", c.index));
        }
        if (events[i].events & EPOLLOUT) {
          if (!c.connected) {
            c.connected = true;
            set_events(c, false);
            on_connected_(c);
          } else {
            flush(c);
          }
        }
        if (events[i].events & EPOLLIN) read(c);
      }
    }
  }

 private:
  void open_socket(Conn& c) {
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
    const int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Spread clients over 127.0.0.x source addresses so 16k connections never run out of
    // ephemeral ports (each source address has its own port range).
    ::setsockopt(c.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr =
        htonl(0x7F000001u + static_cast<std::uint32_t>(c.index % args_.source_ips));
    if (::bind(c.fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      throw std::runtime_error(fmt::format("bind source: {}", std::strerror(errno)));
    }
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(args_.port);
    dst.sin_addr.s_addr = htonl(0x7F000001u);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 &&
        errno != EINPROGRESS) {
      throw std::runtime_error(fmt::format("connect: {}", std::strerror(errno)));
    }
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u32 = static_cast<std::uint32_t>(c.index);
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
  }

  void set_events(Conn& c, bool want_write) {
    epoll_event ev{};
    ev.events = EPOLLIN | (want_write ? EPOLLOUT : 0u);
    ev.data.u32 = static_cast<std::uint32_t>(c.index);
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_write = want_write;
  }

  void flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n =
          ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!c.want_write) set_events(c, true);
        return;
      }
      throw std::runtime_error(fmt::format("send: {}", std::strerror(errno)));
    }
    c.out.clear();
    c.out_off = 0;
    if (c.want_write) set_events(c, false);
  }

  // One recv per readiness event: epoll is level-triggered here, so unread bytes are reported
  // again, and a second recv that only returns EAGAIN would double the generator's receive calls.
  void read(Conn& c) {
    char buf[16384];
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0)
      throw std::runtime_error(fmt::format("connection {} closed by the server", c.index));
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      throw std::runtime_error(fmt::format("recv: {}", std::strerror(errno)));
    }
    c.in.append(buf, static_cast<std::size_t>(n));
    std::size_t pos = 0;
    while (c.expect > 0 && c.in.size() - pos >= c.expect) {
      const std::string_view reply(c.in.data() + pos, c.expect);
      pos += c.expect;
      c.expect = 0;
      // The callback may queue the next request (and set a new `expect`) on this connection;
      // `reply` stays valid because sending never touches `in`.
      Callback cb = c.on_reply;
      cb(c, reply);
    }
    c.in.erase(0, pos);
  }

  const Args& args_;
  int ep_;
  std::vector<Conn> conns_;
  std::function<void(Conn&)> on_connected_;
};

std::string req(Generation gen, Op op, std::vector<std::string> keys,
                std::vector<std::string> values = {}, std::int64_t number = 0) {
  return encode_request(gen, Command{op, std::move(keys), std::move(values), number, 0});
}

// user + system CPU seconds of a process (all threads) from /proc/<pid>/stat; 0 when unknown.
double other_process_cpu_seconds(int pid) {
  if (pid <= 0) return 0;
  FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (!f) return 0;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  unsigned long utime = 0, stime = 0;
  // Fields after the command: state(3) ... utime(14) stime(15).
  if (!p || std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                        &stime) != 2)
    return 0;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The callbacks are plain function pointers (no allocation per request); what they need lives
// in one run-wide context.
struct Run {
  Loop* loop = nullptr;
  Generation gen = Generation::G2;
  int clients = 0;
  int handshaken = 0;
  // throughput
  std::vector<std::string> set_get;      // per connection: SET k v + GET k, sent together
  std::vector<std::string> set_get_add;  // --pipeline: all three requests of a cycle at once
  std::string add;
  bool pipeline = false;
  std::size_t get_reply_bytes = 0;
  bool measuring = false;
  std::uint64_t ops = 0;
  // barrier
  std::string release_and_wait, wait;
  int released = 0;
  Clock::time_point release_sent{};  // when the last arrival's SET went out: the fan-out starts
  Clock::time_point first_released{};
};
Run g_run;

// G2 connections open with VALIDATE + PING and wait for the echo; G1 ones are ready at once.
void handshake(Conn& c) {
  if (g_run.gen == Generation::G1) {
    ++g_run.handshaken;
    return;
  }
  const std::string hs =
      encode_request(g_run.gen, Command{Op::Validate, {}, {}, 0, kValidateMagic}) +
      encode_request(
          g_run.gen,
          Command{Op::Ping, {}, {}, 0, 0x00FF0000u + static_cast<std::uint32_t>(c.index)});
  g_run.loop->send(c, hs, 4, [](Conn&, std::string_view) { ++g_run.handshaken; });
}

void throughput_cycle(Conn& c);
void on_add_reply(Conn& c, std::string_view) {
  if (g_run.measuring) g_run.ops += 1;
  throughput_cycle(c);
}
void on_get_reply(Conn& c, std::string_view) {
  if (g_run.measuring) g_run.ops += 2;
  g_run.loop->send(c, g_run.add, 8, on_add_reply);
}
void on_pipelined_replies(Conn& c, std::string_view) {
  if (g_run.measuring) g_run.ops += 3;
  throughput_cycle(c);
}
void throughput_cycle(Conn& c) {
  if (g_run.pipeline) {
    g_run.loop->send(c, g_run.set_get_add[static_cast<std::size_t>(c.index)],
                     g_run.get_reply_bytes + 8, on_pipelined_replies);
  } else {
    g_run.loop->send(c, g_run.set_get[static_cast<std::size_t>(c.index)], g_run.get_reply_bytes,
                     on_get_reply);
  }
}

int run_throughput(const Args& a) {
  Loop loop(a);
  g_run.loop = &loop;
  g_run.gen = a.gen;
  g_run.clients = a.clients;
  const std::string value(a.value_bytes, 'v');
  for (int i = 0; i < a.clients; ++i) {
    const std::string key = "/bench/k" + std::to_string(i);
    g_run.set_get.push_back(req(a.gen, Op::Set, {key}, {value}) + req(a.gen, Op::Get, {key}));
  }
  g_run.add = req(a.gen, Op::Add, {"/bench/counter"}, {}, 1);
  for (const auto& sg : g_run.set_get) g_run.set_get_add.push_back(sg + g_run.add);
  g_run.pipeline = a.pipeline;
  g_run.get_reply_bytes = 8 + a.value_bytes;
  loop.connect_all(a.clients, std::min(a.connect_window, 256), handshake);
  loop.run_until([&] { return g_run.handshaken == a.clients; });
  for (auto& c : loop.conns()) throughput_cycle(c);
  // Warm up briefly, then count.
  const auto warm = Clock::now() + std::chrono::milliseconds(300);
  loop.run_until([&] { return Clock::now() >= warm; });
  g_run.measuring = true;
  const double cpu0 = process_cpu_seconds();
  const double server_cpu0 = other_process_cpu_seconds(a.server_pid);
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration<double>(a.seconds);
  loop.run_until([&] { return Clock::now() >= end; });
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  const double server_cpu = other_process_cpu_seconds(a.server_pid) - server_cpu0;
  const auto ops = g_run.ops;
  // loadgen_cpu_us_per_op: the generator's own CPU per op; if it is not below the server's, the
  // generator (not the server) limits the measurement.
  fmt::print(
      "{{\"mode\":\"throughput\",\"clients\":{},\"value_bytes\":{},\"pipeline\":{},\"ops\":{},"
      "\"seconds\":{:.3f},\"ops_per_s\":{:.0f},\"loadgen_cpu_us_per_op\":{:.2f},\"server_cpu_us_"
      "per_op\":{:.2f}}}\n",
      a.clients, a.value_bytes, a.pipeline, ops, secs, static_cast<double>(ops) / secs,
      cpu * 1e6 / static_cast<double>(std::max<std::uint64_t>(ops, 1)),
      server_cpu * 1e6 / static_cast<double>(std::max<std::uint64_t>(ops, 1)));
  return 0;
}

void on_released(Conn&, std::string_view reply) {
  if (reply[0] != static_cast<char>(kStopWaiting))
    throw std::runtime_error("unexpected WAIT reply");
  if (g_run.released++ == 0) g_run.first_released = Clock::now();
}
void on_barrier_add(Conn& c, std::string_view reply) {
  const bool last = get_i64(reply.data()) == g_run.clients;
  if (last) g_run.release_sent = Clock::now();
  g_run.loop->send(c, last ? g_run.release_and_wait : g_run.wait, 1, on_released);
}

int run_barrier(const Args& a) {
  Loop loop(a);
  g_run.loop = &loop;
  g_run.gen = a.gen;
  g_run.clients = a.clients;
  const auto t_connect = Clock::now();
  loop.connect_all(a.clients, a.connect_window, handshake);
  loop.run_until([&] { return g_run.handshaken == a.clients; });
  const double connect_s = std::chrono::duration<double>(Clock::now() - t_connect).count();
  // Keys unique to this run, so repeated runs against one server do not see old counters.
  const std::string run =
      fmt::format("/bench/{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
  const std::string add = req(a.gen, Op::Add, {run + "/barrier"}, {}, 1);
  g_run.wait = req(a.gen, Op::Wait, {run + "/released"});
  g_run.release_and_wait = req(a.gen, Op::Set, {run + "/released"}, {"1"}) + g_run.wait;
  const double cpu0 = process_cpu_seconds();
  const double server_cpu0 = other_process_cpu_seconds(a.server_pid);
  const auto t0 = Clock::now();
  for (auto& c : loop.conns()) loop.send(c, add, 8, on_barrier_add);
  loop.run_until([&] { return g_run.released == a.clients; });
  const auto t_end = Clock::now();
  const double release_s = std::chrono::duration<double>(t_end - t0).count();
  // Phases: until the last arrival sent the release SET (all ADDs answered), then the fan-out of
  // STOP_WAITING to everyone (first and last one received).
  auto since = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  };
  fmt::print(
      "{{\"mode\":\"barrier\",\"clients\":{},\"connect_s\":{:.3f},\"release_s\":{:.3f},"
      "\"arrivals_s\":{:.3f},\"first_release_s\":{:.3f},\"fanout_s\":{:.3f},\"loadgen_cpu_s\":{:."
      "3f},"
      "\"server_cpu_s\":{:.3f}}}\n",
      a.clients, connect_s, release_s, since(t0, g_run.release_sent),
      since(t0, g_run.first_released), since(g_run.release_sent, t_end),
      process_cpu_seconds() - cpu0, other_process_cpu_seconds(a.server_pid) - server_cpu0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
      lim.rlim_cur = lim.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
    const Args a = parse(argc, argv);
    if (a.mode == "throughput") return run_throughput(a);
    if (a.mode == "barrier") return run_barrier(a);
    throw std::runtime_error("unknown mode " + a.mode);
  } catch (const std::exception& e) {
    fmt::print("{{\"error\":\"{}\"}}\n", e.what());
    return 1;
  }
}
