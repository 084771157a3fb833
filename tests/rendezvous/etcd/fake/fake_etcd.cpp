#include "fake_etcd.hpp"
#include "key_range.hpp"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "rendezvous/etcd/etcd_codec.hpp"

namespace ddp::rdzv::etcd::fake {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using nlohmann::json;
using tcp = asio::ip::tcp;

std::string grpc_error_body(int code, const std::string& message) {
  return json{{"error", message}, {"code", code}, {"message", message}}.dump();
}

namespace {

struct Kv {
  std::string value;
  std::int64_t create = 0, mod = 0, version = 0, lease = 0;
};

struct Event {
  std::int64_t revision = 0;
  bool deleted = false;
  std::string key;
  Kv kv;
};

struct Watcher {
  int member = 0;
  std::string key, end;
  std::int64_t next = 0;
  asio::steady_timer* wake = nullptr;
  bool dropped = false;
};

std::string b64(const std::string& s) { return base64_encode(s); }
std::string unb64(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return {};
  return base64_decode(it->get<std::string>()).value_or("");
}
std::int64_t num(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  return it->get<std::int64_t>();
}

json kv_json(const std::string& key, const Kv& kv) {
  json j{{"key", b64(key)},
         {"create_revision", std::to_string(kv.create)},
         {"mod_revision", std::to_string(kv.mod)},
         {"version", std::to_string(kv.version)}};
  if (!kv.value.empty()) j["value"] = b64(kv.value);
  if (kv.lease != 0) j["lease"] = std::to_string(kv.lease);
  return j;
}

}  // namespace

struct FakeEtcd::State {
  mutable std::mutex m;
  std::map<std::string, Kv> kvs;
  std::vector<Event> history;
  std::int64_t revision = 1;
  std::int64_t compacted = 0;
  std::int64_t next_lease = 0x7a000;
  std::int64_t granted_ttl = 0;
  std::map<std::int64_t, std::int64_t> leases;  // id -> ttl
  std::vector<Fault> faults;
  std::vector<std::string> cluster_ids;  // each member's, in its status
  std::vector<std::map<std::string, int>> hits;
  std::list<Watcher*> watchers;
  std::vector<std::uint16_t> ports;
  bool ipv6 = false;
  // Last: destroyed first, so that the coroutines it still holds find the state above alive.
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::thread thread;

  // Every reply's header names the answering member's cluster, as etcd's does.
  json header(int member) const {
    json h{{"revision", std::to_string(revision)}};
    if (!cluster_ids[member].empty()) h["cluster_id"] = cluster_ids[member];
    return h;
  }

  // Under m.
  void record(std::string key, bool deleted, Kv kv) {
    history.push_back(Event{revision, deleted, std::move(key), std::move(kv)});
  }
  void notify() {
    asio::post(io, [this] {
      std::lock_guard lock(m);
      for (auto* w : watchers) w->wake->cancel();
    });
  }
  std::int64_t put_locked(const std::string& key, const std::string& value, std::int64_t lease) {
    ++revision;
    Kv& kv = kvs[key];
    if (kv.create == 0) kv.create = revision;
    kv.mod = revision;
    ++kv.version;
    kv.value = value;
    kv.lease = lease;
    record(key, false, kv);
    return revision;
  }
  void erase_locked(const std::string& key, const std::string& end) {
    bool any = false;
    for (auto it = kvs.begin(); it != kvs.end();) {
      if (in_range(it->first, key, end)) {
        if (!any) ++revision;
        any = true;
        record(it->first, true, Kv{{}, 0, revision, 0, 0});
        it = kvs.erase(it);
      } else {
        ++it;
      }
    }
  }

  // One unary call: the status and body.
  std::pair<unsigned, std::string> handle(int member, const std::string& path, const json& req) {
    std::lock_guard lock(m);
    if (path == "/v3/kv/range") {
      const std::string key = unb64(req, "key"), end = unb64(req, "range_end");
      const std::int64_t limit = num(req, "limit"), at = num(req, "revision");
      if (at > 0 && at <= compacted)
        return {400, grpc_error_body(11, "etcdserver: mvcc: required revision has been compacted")};
      json out{{"header", header(member)}, {"kvs", json::array()}};
      std::int64_t count = 0;
      for (const auto& [k, kv] : kvs) {
        if (!in_range(k, key, end)) continue;
        ++count;
        if (limit > 0 && static_cast<std::int64_t>(out["kvs"].size()) >= limit) {
          out["more"] = true;
          continue;
        }
        json one = kv_json(k, kv);
        if (req.value("keys_only", false)) one.erase("value");
        out["kvs"].push_back(std::move(one));
      }
      out["count"] = std::to_string(count);
      if (out["kvs"].empty()) out.erase("kvs");
      return {200, out.dump()};
    }
    if (path == "/v3/kv/put") {
      const std::int64_t lease = num(req, "lease");
      if (lease != 0 && !leases.count(lease))
        return {404, grpc_error_body(5, "etcdserver: requested lease not found")};
      put_locked(unb64(req, "key"), unb64(req, "value"), lease);
      notify();
      return {200, json{{"header", header(member)}}.dump()};
    }
    if (path == "/v3/kv/deleterange") {
      erase_locked(unb64(req, "key"), unb64(req, "range_end"));
      notify();
      return {200, json{{"header", header(member)}}.dump()};
    }
    if (path == "/v3/lease/grant") {
      const std::int64_t id = ++next_lease;
      const std::int64_t ttl = granted_ttl > 0 ? granted_ttl : num(req, "TTL");
      leases[id] = ttl;
      return {
          200,
          json{{"header", header(member)}, {"ID", std::to_string(id)}, {"TTL", std::to_string(ttl)}}
              .dump()};
    }
    if (path == "/v3/lease/keepalive") {
      const std::int64_t id = num(req, "ID");
      json result{{"header", header(member)}, {"ID", std::to_string(id)}};
      if (auto it = leases.find(id); it != leases.end()) result["TTL"] = std::to_string(it->second);
      return {200, json{{"result", result}}.dump()};
    }
    if (path == "/v3/lease/revoke") {
      const std::int64_t id = num(req, "ID");
      if (!leases.erase(id))
        return {404, grpc_error_body(5, "etcdserver: requested lease not found")};
      drop_lease_keys(id);
      return {200, json{{"header", header(member)}}.dump()};
    }
    if (path == "/v3/maintenance/status") {
      return {200,
              json{{"header", header(member)}, {"leader", "1"}, {"version", "3.4-fake"}}.dump()};
    }
    return {404, "404 page not found\n"};
  }

  void drop_lease_keys(std::int64_t id) {
    std::vector<std::string> gone;
    for (const auto& [k, kv] : kvs)
      if (kv.lease == id) gone.push_back(k);
    if (gone.empty()) return;
    ++revision;
    for (const auto& k : gone) {
      record(k, true, Kv{{}, 0, revision, 0, 0});
      kvs.erase(k);
    }
    notify();
  }

  static asio::awaitable<void> write_raw(beast::tcp_stream& stream, std::string bytes) {
    co_await asio::async_write(stream.socket(), asio::buffer(bytes), use_awaitable);
  }
  static std::string chunk(const std::string& data) {
    return fmt::format("{:x}\r\n{}\r\n", data.size(), data);
  }

  asio::awaitable<void> watch(int member, beast::tcp_stream& stream, const json& req) {
    const json create = req.value("create_request", json::object());
    Watcher w;
    w.member = member;
    w.key = unb64(create, "key");
    w.end = unb64(create, "range_end");
    asio::steady_timer wake(io);
    w.wake = &wake;
    std::string created;
    {
      std::lock_guard lock(m);
      const std::int64_t start = num(create, "start_revision");
      w.next = start > 0 ? start : revision + 1;
      watchers.push_back(&w);
      created = json{{"result", {{"header", header(member)}, {"created", true}}}}.dump();
    }
    struct Unlist {
      State* s;
      Watcher* w;
      ~Unlist() {
        std::lock_guard lock(s->m);
        s->watchers.remove(w);
      }
    } unlist{this, &w};
    co_await write_raw(stream,
                       "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n" +
                           chunk(created + "\n"));
    while (true) {
      std::string out;
      bool end = false;
      {
        std::lock_guard lock(m);
        if (w.dropped) co_return;
        const bool silenced = faults[member].silence_watches;
        if (compacted > 0 && w.next <= compacted) {
          out = json{{"result",
                      {{"header", header(member)},
                       {"canceled", true},
                       {"compact_revision", std::to_string(compacted + 1)},
                       {"cancel_reason", "mvcc: required revision has been compacted"}}}}
                    .dump();
          end = true;
        } else {
          json events = json::array();
          for (const auto& e : history) {
            if (e.revision < w.next || !in_range(e.key, w.key, w.end)) continue;
            json kv = kv_json(e.key, e.kv);
            events.push_back(e.deleted ? json{{"type", "DELETE"}, {"kv", kv}} : json{{"kv", kv}});
          }
          w.next = revision + 1;
          if (!events.empty() && !silenced)
            out = json{{"result", {{"header", header(member)}, {"events", events}}}}.dump();
        }
      }
      if (!out.empty()) co_await write_raw(stream, chunk(out + "\n"));
      if (end) co_return;
      wake.expires_at(asio::steady_timer::time_point::max());
      boost::system::error_code ec;
      co_await wake.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }

  asio::awaitable<void> serve(int member, tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> req;
      co_await http::async_read(stream, buffer, req, use_awaitable);
      const std::string path(req.target());
      Fault fault;
      {
        std::lock_guard lock(m);
        ++hits[member][path];
        fault = faults[member];
      }
      auto respond = [&](unsigned status, std::string body) -> asio::awaitable<void> {
        http::response<http::string_body> res{static_cast<http::status>(status), 11};
        res.set(http::field::content_type, "application/json");
        res.keep_alive(req.keep_alive());
        res.body() = std::move(body);
        res.prepare_payload();
        co_await http::async_write(stream, res, use_awaitable);
      };
      switch (fault.kind) {
        case Fault::Kind::BlackHole: {
          asio::steady_timer never(io, std::chrono::hours(1));
          boost::system::error_code ec;
          co_await never.async_wait(asio::redirect_error(use_awaitable, ec));
          co_return;
        }
        case Fault::Kind::Status:
          co_await respond(fault.status, fault.body);
          continue;
        case Fault::Kind::NotJson:
          co_await respond(200, "<html><body>It works!</body></html>");
          continue;
        case Fault::Kind::HugeLength:
          co_await write_raw(stream,
                             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             "Content-Length: 99999999999999\r\n\r\n{");
          co_return;
        case Fault::Kind::None:
          break;
      }
      // Named, not a temporary in the co_await expression (GCC destroys those twice when the
      // frame is destroyed while suspended).
      json request = json::parse(req.body(), nullptr, false);
      if (!request.is_object()) request = json::object();
      if (path == "/v3/watch") {
        co_await watch(member, stream, request);
        co_return;
      }
      auto answer = handle(member, path, request);
      co_await respond(answer.first, std::move(answer.second));
      if (!req.keep_alive()) co_return;
    }
  }

  asio::awaitable<void> accept(int member) {
    while (true) {
      tcp::socket socket = co_await acceptors[member]->async_accept(use_awaitable);
      asio::co_spawn(io, serve(member, std::move(socket)), asio::detached);
    }
  }

  template <class F>
  auto on_io(F f) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    asio::post(io, [&task] { task(); });
    return result.get();
  }
};

FakeEtcd::FakeEtcd(int members, bool ipv6) : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.ipv6 = ipv6;
  s.faults.resize(members);
  s.cluster_ids.assign(members, "14841639068965178418");
  s.hits.resize(members);
  for (int i = 0; i < members; ++i) {
    auto acceptor = std::make_unique<tcp::acceptor>(
        s.io, tcp::endpoint(asio::ip::make_address(ipv6 ? "::1" : "127.0.0.1"), 0));
    s.ports.push_back(acceptor->local_endpoint().port());
    s.acceptors.push_back(std::move(acceptor));
    asio::co_spawn(s.io, s.accept(i), asio::detached);
  }
  s.thread = std::thread([&s] { s.io.run(); });
}

FakeEtcd::~FakeEtcd() {
  state_->io.stop();
  state_->thread.join();
}

std::string FakeEtcd::endpoints() const {
  std::string out;
  for (auto port : state_->ports) {
    if (!out.empty()) out += ',';
    out += state_->ipv6 ? fmt::format("[::1]:{}", port) : fmt::format("127.0.0.1:{}", port);
  }
  return out;
}

void FakeEtcd::set_fault(int member, Fault fault) {
  std::lock_guard lock(state_->m);
  state_->faults.at(member) = std::move(fault);
}

void FakeEtcd::drop_watches(int member) {
  state_->on_io([&] {
    std::lock_guard lock(state_->m);
    for (auto* w : state_->watchers) {
      if (w->member != member) continue;
      w->dropped = true;
      w->wake->cancel();
    }
    return 0;
  });
}

void FakeEtcd::set_cluster_id(int member, std::string id) {
  std::lock_guard lock(state_->m);
  state_->cluster_ids.at(member) = std::move(id);
}

void FakeEtcd::set_granted_ttl(std::int64_t ttl) {
  std::lock_guard lock(state_->m);
  state_->granted_ttl = ttl;
}

void FakeEtcd::compact() {
  std::lock_guard lock(state_->m);
  state_->compacted = state_->revision;
  state_->history.clear();
  state_->notify();
}

void FakeEtcd::expire_lease(std::int64_t id) {
  std::lock_guard lock(state_->m);
  state_->leases.erase(id);
  state_->drop_lease_keys(id);
}

std::int64_t FakeEtcd::put(const std::string& key, const std::string& value) {
  std::lock_guard lock(state_->m);
  const auto r = state_->put_locked(key, value, 0);
  state_->notify();
  return r;
}

void FakeEtcd::erase(const std::string& key) {
  std::lock_guard lock(state_->m);
  state_->erase_locked(key, {});
  state_->notify();
}

std::int64_t FakeEtcd::revision() const {
  std::lock_guard lock(state_->m);
  return state_->revision;
}

int FakeEtcd::requests(int member, const std::string& path) const {
  std::lock_guard lock(state_->m);
  const auto& h = state_->hits.at(member);
  auto it = h.find(path);
  return it == h.end() ? 0 : it->second;
}

int FakeEtcd::open_watches(int member) const {
  std::lock_guard lock(state_->m);
  int n = 0;
  for (auto* w : state_->watchers) n += w->member == member && !w->dropped;
  return n;
}

}  // namespace ddp::rdzv::etcd::fake
