#include "rendezvous/etcd/etcd_codec.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <nlohmann/json.hpp>

namespace ddp::rdzv::etcd {
namespace {

using nlohmann::json;

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

json parse_json(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    throw EtcdProtocolError(
        fmt::format("etcd sent a reply that is not a JSON object: '{}'", body.substr(0, 200)));
  }
  return j;
}

// The gateway writes 64-bit integers as strings; accept numbers too. A missing field is 0
// (proto3 leaves default values out).
std::int64_t int64_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc{} && end == s.data() + s.size()) return v;
  }
  throw EtcdProtocolError(
      fmt::format("etcd sent '{}' as {}, not a 64-bit integer", it->dump(), name));
}

std::string bytes_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw EtcdProtocolError(fmt::format("etcd sent a non-string {}", name));
  auto decoded = base64_decode(it->get_ref<const std::string&>());
  if (!decoded) throw EtcdProtocolError(fmt::format("etcd sent {} that is not base64", name));
  return *decoded;
}

std::int64_t header_revision(const json& j) {
  auto h = j.find("header");
  return h != j.end() && h->is_object() ? int64_field(*h, "revision") : 0;
}

// header.cluster_id of a reply (or of a stream message's "result"), as the decimal text the
// gateway writes; empty when absent.
std::string header_cluster_id(const json& j) {
  if (!j.is_object()) return {};
  auto h = j.find("header");
  if (h == j.end() || !h->is_object()) return {};
  auto id = h->find("cluster_id");
  if (id == h->end()) return {};
  if (id->is_string()) return id->get<std::string>();
  if (id->is_number_unsigned()) return std::to_string(id->get<std::uint64_t>());
  if (id->is_number_integer()) return std::to_string(id->get<std::int64_t>());
  return {};
}

std::optional<GatewayError> gateway_error_of(const json& j) {
  // grpc-gateway, unary: {"error": "...", "code": N, "message": "..."}; a stream's message:
  // {"error": {"grpc_code": N, "http_code": H, "message": "...", "http_status": "..."}}.
  if (!j.is_object()) return std::nullopt;
  auto e = j.find("error");
  if (e != j.end() && e->is_object()) {
    GatewayError out;
    if (auto c = e->find("grpc_code"); c != e->end() && c->is_number_integer()) out.code = *c;
    if (auto m = e->find("message"); m != e->end() && m->is_string()) out.message = *m;
    return out;
  }
  if (e == j.end() && !(j.contains("code") && j.contains("message"))) return std::nullopt;
  GatewayError out;
  if (auto c = j.find("code"); c != j.end() && c->is_number_integer()) out.code = *c;
  out.message = j.value("message", std::string());
  if (out.message.empty() && e != j.end() && e->is_string()) out.message = *e;
  return out;
}

void throw_if_error(const json& j) {
  if (auto e = gateway_error_of(j)) {
    throw EtcdRefused(fmt::format("etcd refused the request: {}", e->message), e->code);
  }
}

KeyValue parse_kv(const json& j) {
  if (!j.is_object()) throw EtcdProtocolError("etcd sent a key-value that is not an object");
  KeyValue kv;
  kv.key = bytes_field(j, "key");
  kv.value = bytes_field(j, "value");
  kv.create_revision = int64_field(j, "create_revision");
  kv.mod_revision = int64_field(j, "mod_revision");
  kv.version = int64_field(j, "version");
  kv.lease = int64_field(j, "lease");
  return kv;
}

RangeReply parse_range_json(const json& j) {
  RangeReply r;
  r.revision = header_revision(j);
  if (auto kvs = j.find("kvs"); kvs != j.end() && !kvs->is_null()) {
    if (!kvs->is_array()) throw EtcdProtocolError("etcd sent kvs that is not an array");
    for (const auto& kv : *kvs) r.kvs.push_back(parse_kv(kv));
  }
  r.more = j.value("more", false);
  return r;
}

json op_json(const Op& op) {
  json body{{"key", base64_encode(op.key)}};
  switch (op.kind) {
    case Op::Kind::Put:
      body["value"] = base64_encode(op.value);
      if (op.lease != 0) body["lease"] = std::to_string(op.lease);
      return json{{"request_put", body}};
    case Op::Kind::Range:
      if (!op.range_end.empty()) body["range_end"] = base64_encode(op.range_end);
      return json{{"request_range", body}};
    case Op::Kind::Delete:
      if (!op.range_end.empty()) body["range_end"] = base64_encode(op.range_end);
      return json{{"request_delete_range", body}};
  }
  return body;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t n = (std::uint8_t(bytes[i]) << 16) | (std::uint8_t(bytes[i + 1]) << 8) |
                            std::uint8_t(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out.push_back(kAlphabet[(n >> shift) & 63]);
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t n = std::uint8_t(bytes[i]) << 16;
    if (rest == 2) n |= std::uint8_t(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::array<int, 256> value{};
  value.fill(-1);
  for (std::size_t k = 0; k < kAlphabet.size(); ++k) value[std::uint8_t(kAlphabet[k])] = int(k);
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    std::uint32_t n = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && last && k >= 2) {
        ++pad;
        n <<= 6;
        continue;
      }
      if (pad > 0) return std::nullopt;  // data after padding
      const int v = value[std::uint8_t(c)];
      if (v < 0) return std::nullopt;
      n = (n << 6) | std::uint32_t(v);
    }
    out.push_back(char((n >> 16) & 0xff));
    if (pad < 2) out.push_back(char((n >> 8) & 0xff));
    if (pad < 1) out.push_back(char(n & 0xff));
    // Canonical: the bits the padding hides must be zero.
    if ((pad == 1 && (n & 0xff) != 0) || (pad == 2 && (n & 0xffff) != 0)) return std::nullopt;
  }
  return out;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (std::uint8_t(end.back()) < 0xff) {
      end.back() = char(std::uint8_t(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Op put_op(std::string key, std::string value, std::int64_t lease) {
  return Op{Op::Kind::Put, std::move(key), std::move(value), lease, {}};
}
Op range_op(std::string key, std::string range_end) {
  return Op{Op::Kind::Range, std::move(key), {}, 0, std::move(range_end)};
}
Op delete_op(std::string key, std::string range_end) {
  return Op{Op::Kind::Delete, std::move(key), {}, 0, std::move(range_end)};
}

std::string range_request(std::string_view key, std::string_view range_end, std::int64_t limit,
                          std::int64_t revision, bool keys_only) {
  json body{{"key", base64_encode(key)}};
  if (!range_end.empty()) body["range_end"] = base64_encode(range_end);
  if (limit > 0) body["limit"] = std::to_string(limit);
  if (revision > 0) body["revision"] = std::to_string(revision);
  if (keys_only) body["keys_only"] = true;
  return body.dump();
}

std::string put_request(std::string_view key, std::string_view value, std::int64_t lease) {
  json body{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  return body.dump();
}

std::string delete_request(std::string_view key, std::string_view range_end) {
  json body{{"key", base64_encode(key)}};
  if (!range_end.empty()) body["range_end"] = base64_encode(range_end);
  return body.dump();
}

std::string txn_request(const std::vector<Compare>& compares, const std::vector<Op>& success,
                        const std::vector<Op>& failure) {
  json cmp = json::array();
  for (const auto& c : compares) {
    json one{{"key", base64_encode(c.key)}, {"result", "EQUAL"}};
    switch (c.target) {
      case Compare::Target::Version:
        one["target"] = "VERSION";
        one["version"] = std::to_string(c.number);
        break;
      case Compare::Target::Create:
        one["target"] = "CREATE";
        one["create_revision"] = std::to_string(c.number);
        break;
      case Compare::Target::Mod:
        one["target"] = "MOD";
        one["mod_revision"] = std::to_string(c.number);
        break;
      case Compare::Target::Value:
        one["target"] = "VALUE";
        one["value"] = base64_encode(c.value);
        break;
    }
    cmp.push_back(std::move(one));
  }
  json ok = json::array();
  for (const auto& op : success) ok.push_back(op_json(op));
  json not_ok = json::array();
  for (const auto& op : failure) not_ok.push_back(op_json(op));
  return json{{"compare", cmp}, {"success", ok}, {"failure", not_ok}}.dump();
}

std::string lease_grant_request(std::int64_t ttl_seconds) {
  return json{{"TTL", std::to_string(ttl_seconds)}}.dump();
}

std::string lease_id_request(std::int64_t id) { return json{{"ID", std::to_string(id)}}.dump(); }

std::string watch_request(std::string_view key, std::string_view range_end,
                          std::int64_t start_revision) {
  json create{{"key", base64_encode(key)}};
  if (!range_end.empty()) create["range_end"] = base64_encode(range_end);
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  create["progress_notify"] = true;
  return json{{"create_request", create}}.dump();
}

RangeReply parse_range(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  return parse_range_json(j);
}

std::string parse_cluster_id(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  return header_cluster_id(j);
}

std::int64_t parse_revision(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  return header_revision(j);
}

TxnReply parse_txn(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  TxnReply r;
  r.revision = header_revision(j);
  r.succeeded = j.value("succeeded", false);
  if (auto responses = j.find("responses"); responses != j.end() && responses->is_array()) {
    for (const auto& one : *responses) {
      if (auto range = one.find("response_range"); range != one.end()) {
        r.ranges.push_back(parse_range_json(*range));
      }
    }
  }
  return r;
}

std::string authenticate_request(std::string_view user, std::string_view password) {
  return json{{"name", std::string(user)}, {"password", std::string(password)}}.dump();
}

std::string parse_auth_token(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  auto t = j.find("token");
  if (t == j.end() || !t->is_string() || t->get<std::string>().empty())
    throw EtcdProtocolError("etcd answered the authentication without a token");
  return t->get<std::string>();
}

LeaseGrant parse_lease_grant(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  if (auto e = j.find("error"); e != j.end() && e->is_string() && !e->get<std::string>().empty())
    throw EtcdProtocolError(fmt::format("etcd refused the lease: {}", e->get<std::string>()));
  const std::int64_t id = int64_field(j, "ID");
  if (id == 0) throw EtcdProtocolError("etcd granted a lease without an ID");
  return LeaseGrant{id, int64_field(j, "TTL")};
}

std::int64_t parse_keepalive(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  auto result = j.find("result");
  if (result == j.end() || !result->is_object())
    throw EtcdProtocolError("etcd answered a keepalive without a result");
  return int64_field(*result, "TTL");
}

WatchMessage parse_watch_message(std::string_view body) {
  json j = parse_json(body);
  throw_if_error(j);
  auto result = j.find("result");
  if (result == j.end() || !result->is_object()) {
    if (auto e = j.find("error"); e != j.end())
      throw EtcdProtocolError(fmt::format("etcd ended the watch: {}", e->dump()));
    throw EtcdProtocolError("etcd sent a watch message without a result");
  }
  const json& r = *result;
  WatchMessage m;
  m.created = r.value("created", false);
  m.canceled = r.value("canceled", false);
  m.revision = header_revision(r);
  m.compact_revision = int64_field(r, "compact_revision");
  m.cancel_reason = r.value("cancel_reason", std::string());
  m.cluster_id = header_cluster_id(r);
  if (auto events = r.find("events"); events != r.end() && events->is_array()) {
    for (const auto& e : *events) {
      WatchEvent event;
      event.type = e.value("type", std::string("PUT")) == "DELETE" ? WatchEvent::Type::Delete
                                                                   : WatchEvent::Type::Put;
      auto kv = e.find("kv");
      if (kv == e.end()) throw EtcdProtocolError("etcd sent a watch event without kv");
      event.kv = parse_kv(*kv);
      m.events.push_back(std::move(event));
    }
  }
  return m;
}

std::optional<GatewayError> parse_gateway_error(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return gateway_error_of(j);
}

std::optional<std::string> gateway_error(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    throw_if_error(j);
  } catch (const EtcdProtocolError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

void WatchFramer::feed(std::string_view bytes) {
  buffer_.append(bytes);
  for (; scanned_ < buffer_.size(); ++scanned_) {
    const char c = buffer_[scanned_];
    if (start_ == std::string::npos) {
      if (c == '{') {
        start_ = scanned_;
        depth_ = 1;
      }
      continue;  // whitespace (or noise) between messages
    }
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{') {
      ++depth_;
    } else if (c == '}' && --depth_ == 0) {
      ready_.push_back(buffer_.substr(start_, scanned_ + 1 - start_));
      start_ = std::string::npos;
    }
  }
  // Drop what is consumed so the buffer holds at most one partial message.
  const std::size_t keep = start_ == std::string::npos ? buffer_.size() : start_;
  buffer_.erase(0, keep);
  scanned_ -= keep;
  if (start_ != std::string::npos) start_ = 0;
  if (buffer_.size() > max_) {
    throw EtcdProtocolError(fmt::format("etcd sent a watch message over {} bytes", max_));
  }
}

std::optional<std::string> WatchFramer::next() {
  if (taken_ == ready_.size()) {
    ready_.clear();
    taken_ = 0;
    return std::nullopt;
  }
  return std::move(ready_[taken_++]);
}

}  // namespace ddp::rdzv::etcd
