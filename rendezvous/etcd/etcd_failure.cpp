#include "rendezvous/etcd/etcd_failure.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_codec.hpp"

namespace ddp::rdzv::etcd {
namespace {

const char* grpc_code_name(int code) {
  switch (code) {
    case 1:
      return "Canceled";
    case 2:
      return "Unknown";
    case 3:
      return "InvalidArgument";
    case 4:
      return "DeadlineExceeded";
    case 5:
      return "NotFound";
    case 6:
      return "AlreadyExists";
    case 7:
      return "PermissionDenied";
    case 8:
      return "ResourceExhausted";
    case 9:
      return "FailedPrecondition";
    case 10:
      return "Aborted";
    case 11:
      return "OutOfRange";
    case 12:
      return "Unimplemented";
    case 13:
      return "Internal";
    case 14:
      return "Unavailable";
    case 15:
      return "DataLoss";
    case 16:
      return "Unauthenticated";
    default:
      return "code";
  }
}

// A short, printable excerpt of a body that is not etcd's (an HTML error page, a proxy's text).
std::string excerpt(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 120)) out += (c >= 0x20 && c < 0x7f) ? c : ' ';
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (body.size() > 120) out += "...";
  return out;
}

// header.cluster_id as the gateway writes it (a decimal string; a number from other writers).
std::string cluster_id_of(const nlohmann::json& header) {
  const auto id = header.find("cluster_id");
  if (id == header.end()) return {};
  if (id->is_string()) return id->get<std::string>();
  if (id->is_number_unsigned()) return std::to_string(id->get<std::uint64_t>());
  if (id->is_number_integer()) return std::to_string(id->get<std::int64_t>());
  return {};
}

}  // namespace

bool grpc_code_is_transient(int code) {
  return code == kGrpcUnavailable || code == kGrpcDeadlineExceeded ||
         code == kGrpcResourceExhausted;
}

ReplyVerdict classify_reply(unsigned http_status, std::string_view body) {
  ReplyVerdict v;
  // etcd's own error first: its code says what it means, whatever the HTTP status.
  if (auto error = parse_gateway_error(body); error && error->code != 0) {
    v.grpc_code = error->code;
    v.line = fmt::format("HTTP {} (gRPC {} {}): {}", http_status, error->code,
                         grpc_code_name(error->code), error->message);
    v.etcd_answered = grpc_code_is_transient(error->code);
    v.kind = v.etcd_answered ? ReplyVerdict::Kind::NextMember : ReplyVerdict::Kind::Refused;
    return v;
  }
  if (http_status == 200) {
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    // Every answer of etcd's v3 gateway carries a response header (cluster, member, revision);
    // a streaming call's (keepalive) sits under "result". A 200 JSON without one is another
    // service on that address: its answer must not be taken for etcd's (a "lease without an ID").
    const auto header_of = [](const nlohmann::json& o) -> const nlohmann::json* {
      const auto h = o.find("header");
      return h != o.end() && h->is_object() ? &*h : nullptr;
    };
    if (!j.is_discarded() && j.is_object()) {
      const auto result = j.find("result");
      const nlohmann::json* header = header_of(j);
      if (header == nullptr && result != j.end() && result->is_object())
        header = header_of(*result);
      if (header != nullptr) {
        v.cluster_id = cluster_id_of(*header);
        return v;  // Answer
      }
      v.kind = ReplyVerdict::Kind::NextMember;
      v.line = fmt::format(
          "HTTP 200 with JSON that has no etcd response header ('{}'; not etcd's v3 JSON gateway?)",
          excerpt(body));
      return v;
    }
    v.kind = ReplyVerdict::Kind::NextMember;
    v.line = fmt::format(
        "HTTP 200 with a body that is not JSON ('{}'; not etcd's v3 JSON gateway?)", excerpt(body));
    return v;
  }
  // A status without etcd's error body: a proxy in front of the member (502, 503, 429), or a
  // service that is not etcd's gateway (404). Another member may be fine.
  v.kind = ReplyVerdict::Kind::NextMember;
  v.line = fmt::format("HTTP {}{}{}", http_status, body.empty() ? "" : ": ", excerpt(body));
  if (http_status == 404) v.line += " (not etcd's v3 JSON gateway?)";
  return v;
}

}  // namespace ddp::rdzv::etcd
