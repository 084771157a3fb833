// Start-up simulator: plays ranks [rank-begin, rank-end) of an N-rank job doing what PyTorch's
// init_process_group does against a TCP store, over the wire protocol from one epoll loop:
//   1. connect, G2 handshake (VALIDATE + PING, echo awaited)
//   2. the store-based barrier: ADD barrier 1; the rank whose ADD returns N SETs the release key;
//      everyone WAITs on it
//   3. the NCCL/Gloo unique id: rank 0 SETs it (128 bytes); every other rank WAITs for it, then
//   GETs it
//   4. Gloo's address exchange: every rank SETs its own address (64 bytes) and WAITs + GETs the
//      addresses of --gloo-peers peers (ring neighbours). Gloo's full mesh reads all N-1 addresses
//      per rank (N^2 requests: 10^10 at 100k), which no store serves in seconds; the peer count
//      is a parameter and reported.
// Rank r talks to endpoint r / ranks-per-agent (mod the endpoint count) of --ports: one port for
// a store used directly, one per agent when each agent runs a proxy.
//
//   init_sim --ports P[,P...] --world N [--rank-begin 0 --rank-end N] [--ranks-per-agent 8]
//            [--gloo-peers 2] [--source-ips 16] [--connect-window 1024] [--timeout 120] [--tag RUN]
//            [--hosts A[,A...]]   (one IPv4 address per --ports entry; default 127.0.0.1)
//            [--hold 1]   (after the JSON line, keep every connection open until stdin closes:
//                          the ranks of a PyTorch job keep their store connection; a shard that
//                          closed its thousands of connections at once would load the machine
//                          while other shards are still initialising)
// Output: one JSON object: wall-clock start/end (CLOCK_REALTIME, so shards in several processes
// can be combined), init seconds, requests and connections this process made, and when each
// rank finished each phase (connect, handshake, barrier, id, done): percentiles in seconds since
// start ("phases") and 10 ms histograms ("hist": [bucket, count] pairs, for combining shards).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rendezvous/codec.hpp"

using namespace ddp::rdzv;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<std::uint16_t> ports;
  std::vector<std::uint32_t> hosts;  // IPv4 per endpoint (host order); empty: all 127.0.0.1
  long world = 0;
  long rank_begin = 0;
  long rank_end = -1;
  int ranks_per_agent = 8;
  int gloo_peers = 2;
  int source_ips = 16;
  int connect_window = 1024;
  double timeout = 120;
  std::string tag = "run";
  bool hold = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string f = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("missing value for " + f);
    const std::string v = argv[i + 1];
    if (f == "--ports") {
      std::size_t pos = 0;
      while (pos <= v.size()) {
        const std::size_t comma = v.find(',', pos);
        a.ports.push_back(static_cast<std::uint16_t>(std::stoi(v.substr(pos, comma - pos))));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else if (f == "--hosts") {
      std::size_t pos = 0;
      while (pos <= v.size()) {
        const std::size_t comma = v.find(',', pos);
        in_addr addr{};
        if (::inet_pton(AF_INET, v.substr(pos, comma - pos).c_str(), &addr) != 1)
          throw std::runtime_error("bad address in --hosts");
        a.hosts.push_back(ntohl(addr.s_addr));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else if (f == "--world")
      a.world = std::stol(v);
    else if (f == "--rank-begin")
      a.rank_begin = std::stol(v);
    else if (f == "--rank-end")
      a.rank_end = std::stol(v);
    else if (f == "--ranks-per-agent")
      a.ranks_per_agent = std::stoi(v);
    else if (f == "--gloo-peers")
      a.gloo_peers = std::stoi(v);
    else if (f == "--source-ips")
      a.source_ips = std::stoi(v);
    else if (f == "--connect-window")
      a.connect_window = std::stoi(v);
    else if (f == "--timeout")
      a.timeout = std::stod(v);
    else if (f == "--tag")
      a.tag = v;
    else if (f == "--hold")
      a.hold = v != "0";
    else
      throw std::runtime_error("unknown flag " + f);
  }
  if (a.ports.empty() || a.world <= 0)
    throw std::runtime_error("usage: init_sim --ports P[,P...] --world N ...");
  if (!a.hosts.empty() && a.hosts.size() != a.ports.size())
    throw std::runtime_error("--hosts needs one address per --ports entry");
  if (a.rank_end < 0) a.rank_end = a.world;
  if (a.rank_begin < 0 || a.rank_end > a.world || a.rank_begin >= a.rank_end)
    throw std::runtime_error("bad rank range");
  if (a.ranks_per_agent < 1 || a.gloo_peers < 0 || a.source_ips < 1 || a.source_ips > 250) {
    throw std::runtime_error("bad --ranks-per-agent, --gloo-peers or --source-ips");
  }
  return a;
}

// Where a rank is in its script; each step sends its requests and awaits `expect` reply bytes.
enum class Step : std::uint8_t {
  Connecting,
  Handshake,
  BarrierAdd,
  BarrierWait,
  IdWait,
  IdGet,
  PeerWait,
  PeerGet,
  Done
};

struct Rank {
  int fd = -1;
  long rank = 0;
  Step step = Step::Connecting;
  int peer = 0;  // index of the Gloo peer being read
  std::string out;
  std::size_t out_off = 0;
  std::string in;
  std::size_t expect = 0;
};

enum Phase : std::uint8_t { kConnect, kHandshake, kBarrier, kId, kDone, kPhases };
constexpr const char* kPhaseNames[kPhases] = {"connect", "handshake", "barrier", "id", "done"};

constexpr std::size_t kIdBytes = 128;   // ncclUniqueId
constexpr std::size_t kAddrBytes = 64;  // a Gloo pair address

class Sim {
 public:
  explicit Sim(const Args& a) : a_(a), ep_(::epoll_create1(EPOLL_CLOEXEC)) {
    ranks_.resize(static_cast<std::size_t>(a.rank_end - a.rank_begin));
    for (auto& t : phase_ms_) t.reserve(ranks_.size());
    barrier_key_ = "/store_based_barrier_key:" + a.tag;
    release_key_ = barrier_key_ + ":last_worker";
    id_key_ = "/" + a.tag + "/nccl_unique_id";
  }
  ~Sim() {
    for (auto& r : ranks_)
      if (r.fd >= 0) ::close(r.fd);
    ::close(ep_);
  }

  void run() {
    start_ = Clock::now();
    const auto deadline = Clock::now() + std::chrono::duration<double>(a_.timeout);
    std::size_t started = 0;
    auto start_more = [&] {
      while (started < ranks_.size() && in_flight_connects_ < a_.connect_window) open(started++);
    };
    start_more();
    epoll_event events[512];
    while (done_ < ranks_.size()) {
      if (Clock::now() > deadline) {
        throw std::runtime_error(
            fmt::format("timed out with {} of {} ranks done", done_, ranks_.size()));
      }
      const int n = ::epoll_wait(ep_, events, 512, 100);
      for (int i = 0; i < n; ++i) {
        Rank& r = ranks_[events[i].data.u32];
        if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          throw std::runtime_error(
              fmt::format("rank {}: {}", r.rank,
                          r.step == Step::Connecting ? "connect failed" : "connection closed"));
        }
        if (events[i].events & EPOLLOUT) {
          if (r.step == Step::Connecting) {
            --in_flight_connects_;
            ++connections_;
            mark(kConnect);
            handshake(r);
          } else if (r.out_off < r.out.size()) {
            flush(r);
          }
        }
        if (events[i].events & EPOLLIN) read(r);
      }
      start_more();
    }
  }

  std::uint64_t requests() const { return requests_; }

  // ,"phases":{...},"hist":{...} for the JSON line.
  std::string phases_json() {
    std::string q = ",\"phases\":{", h = ",\"hist\":{";
    for (int p = 0; p < kPhases; ++p) {
      auto& t = phase_ms_[p];
      std::sort(t.begin(), t.end());
      const auto at = [&](double f) {
        return t.empty() ? 0.0
                         : t[std::min(t.size() - 1, static_cast<std::size_t>(f * t.size()))] / 1e3;
      };
      q += fmt::format("{}\"{}\":[{:.3f},{:.3f},{:.3f},{:.3f}]", p ? "," : "", kPhaseNames[p],
                       at(0.5), at(0.9), at(0.99), at(1.0));
      h += fmt::format("{}\"{}\":[", p ? "," : "", kPhaseNames[p]);
      std::size_t i = 0;
      bool first = true;
      while (i < t.size()) {
        const std::uint32_t b = t[i] / 10;
        std::size_t j = i;
        while (j < t.size() && t[j] / 10 == b) ++j;
        h += fmt::format("{}[{},{}]", first ? "" : ",", b, j - i);
        first = false;
        i = j;
      }
      h += "]";
    }
    return q + "}" + h + "}";
  }
  std::uint64_t connections() const { return connections_; }

 private:
  std::string addr_key(long rank) const { return fmt::format("/{}/gloo/{}", a_.tag, rank); }
  std::string req(Op op, std::vector<std::string> keys, std::vector<std::string> values = {},
                  std::int64_t n = 0, std::uint32_t word = 0) {
    ++requests_;
    return encode_request(Generation::G2, Command{op, std::move(keys), std::move(values), n, word});
  }

  void open(std::size_t index) {
    Rank& r = ranks_[index];
    r.rank = a_.rank_begin + static_cast<long>(index);
    r.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0)
      throw std::runtime_error(fmt::format("socket: {} (fd limit?)", std::strerror(errno)));
    const int one = 1;
    ::setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Each 127.0.0.x source address has its own ephemeral port range.
    ::setsockopt(r.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(0x7F000001u + static_cast<std::uint32_t>(r.rank % a_.source_ips));
    if (::bind(r.fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      throw std::runtime_error(fmt::format("bind source: {}", std::strerror(errno)));
    }
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    const std::size_t endpoint =
        static_cast<std::size_t>(r.rank / a_.ranks_per_agent) % a_.ports.size();
    dst.sin_port = htons(a_.ports[endpoint]);
    dst.sin_addr.s_addr = htonl(a_.hosts.empty() ? 0x7F000001u : a_.hosts[endpoint]);
    if (::connect(r.fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 &&
        errno != EINPROGRESS) {
      throw std::runtime_error(fmt::format("connect: {}", std::strerror(errno)));
    }
    // Edge-triggered for both directions from the start: no EPOLL_CTL_MOD per rank, and epoll
    // does not poll a socket again after reporting it (level-triggered re-polls every reported
    // socket at the next epoll_wait). EPOLLOUT reports the connect, then a send that had to wait.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
    ev.data.u32 = static_cast<std::uint32_t>(index);
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, r.fd, &ev);
    ++in_flight_connects_;
  }

  void send(Rank& r, Step next, const std::string& bytes, std::size_t expect) {
    r.step = next;
    r.expect = expect;
    r.out.append(bytes);
    flush(r);
  }

  void flush(Rank& r) {
    while (r.out_off < r.out.size()) {
      const ssize_t n =
          ::send(r.fd, r.out.data() + r.out_off, r.out.size() - r.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        r.out_off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT resumes
      throw std::runtime_error(fmt::format("send: {}", std::strerror(errno)));
    }
    r.out.clear();
    r.out_off = 0;
  }

  // Edge-triggered: reads until a short read (the socket was empty then; bytes arriving later
  // raise a new edge), without the extra recv that would only answer EAGAIN.
  void read(Rank& r) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(r.fd, buf, sizeof buf, 0);
      if (n == 0)
        throw std::runtime_error(fmt::format("rank {}: connection closed by the server", r.rank));
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        throw std::runtime_error(fmt::format("recv: {}", std::strerror(errno)));
      }
      r.in.append(buf, static_cast<std::size_t>(n));
      while (r.expect > 0 && r.in.size() >= r.expect) {
        const std::string reply = r.in.substr(0, r.expect);
        r.in.erase(0, r.expect);
        r.expect = 0;
        advance(r, reply);
      }
      if (static_cast<std::size_t>(n) < sizeof buf) return;
    }
  }

  void handshake(Rank& r) {
    send(r, Step::Handshake,
         req(Op::Validate, {}, {}, 0, kValidateMagic) +
             req(Op::Ping, {}, {}, 0, static_cast<std::uint32_t>(r.rank)),
         4);
  }

  long peer_rank(const Rank& r, int i) const {
    // Ring neighbours: +1, -1, +2, -2, ...
    const long step = i / 2 + 1;
    return ((r.rank + (i % 2 == 0 ? step : -step)) % a_.world + a_.world) % a_.world;
  }

  void start_gloo(Rank& r) {
    std::string bytes = req(Op::Set, {addr_key(r.rank)}, {std::string(kAddrBytes, 'a')});
    r.peer = 0;
    if (a_.gloo_peers == 0 || a_.world == 1) {
      r.out.append(bytes);
      flush(r);
      finish(r);
      return;
    }
    send(r, Step::PeerWait, bytes + req(Op::Wait, {addr_key(peer_rank(r, 0))}), 1);
  }

  void finish(Rank& r) {
    r.step = Step::Done;
    ++done_;
    mark(kDone);
  }

  void mark(Phase p) {
    phase_ms_[p].push_back(static_cast<std::uint32_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count()));
  }

  void advance(Rank& r, const std::string& reply) {
    switch (r.step) {
      case Step::Handshake:
        mark(kHandshake);
        send(r, Step::BarrierAdd, req(Op::Add, {barrier_key_}, {}, 1), 8);
        break;
      case Step::BarrierAdd: {
        std::string bytes;
        if (get_i64(reply.data()) == a_.world) bytes = req(Op::Set, {release_key_}, {"1"});
        send(r, Step::BarrierWait, bytes + req(Op::Wait, {release_key_}), 1);
        break;
      }
      case Step::BarrierWait:
        mark(kBarrier);
        if (r.rank == 0) mark(kId);
        if (r.rank == 0) {
          r.out.append(req(Op::Set, {id_key_}, {std::string(kIdBytes, 'i')}));
          start_gloo(r);
        } else {
          send(r, Step::IdWait, req(Op::Wait, {id_key_}), 1);
        }
        break;
      case Step::IdWait:
        send(r, Step::IdGet, req(Op::Get, {id_key_}), 8 + kIdBytes);
        break;
      case Step::IdGet:
        mark(kId);
        start_gloo(r);
        break;
      case Step::PeerWait:
        send(r, Step::PeerGet, req(Op::Get, {addr_key(peer_rank(r, r.peer))}), 8 + kAddrBytes);
        break;
      case Step::PeerGet:
        if (++r.peer >= std::min<long>(a_.gloo_peers, a_.world - 1)) {
          finish(r);
        } else {
          send(r, Step::PeerWait, req(Op::Wait, {addr_key(peer_rank(r, r.peer))}), 1);
        }
        break;
      case Step::Connecting:
      case Step::Done:
        throw std::runtime_error(fmt::format("rank {}: unexpected reply", r.rank));
    }
  }

  const Args& a_;
  int ep_;
  std::vector<Rank> ranks_;
  std::string barrier_key_, release_key_, id_key_;
  int in_flight_connects_ = 0;
  std::size_t done_ = 0;
  std::uint64_t requests_ = 0;
  std::uint64_t connections_ = 0;
  Clock::time_point start_;
  std::vector<std::uint32_t> phase_ms_[kPhases];
};

double wall_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
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
    Sim sim(a);
    const double start = wall_now();
    sim.run();
    const double end = wall_now();
    fmt::print(
        "{{\"ranks\":{},\"world\":{},\"start\":{:.6f},\"end\":{:.6f},\"init_s\":{:.3f},"
        "\"requests\":{},"
        "\"connections\":{},\"gloo_peers\":{}{}}}\n",
        a.rank_end - a.rank_begin, a.world, start, end, end - start, sim.requests(),
        sim.connections(), a.gloo_peers, sim.phases_json());
    if (a.hold) {
      std::fflush(stdout);
      char c = 0;
      while (::read(0, &c, 1) > 0) {
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print("{{\"error\":\"{}\"}}\n", e.what());
    return 1;
  }
}
