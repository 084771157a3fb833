#pragma once

// How ddprun's etcd client reads a member's reply: etcd's answer, "not now, here: try another
// member", or etcd's final refusal. Decided by the HTTP status and the gateway's gRPC code, never
// by etcd's English words (they change between versions). Pure; etcd_client.cpp acts on it.

#include <string>
#include <string_view>

namespace ddp::rdzv::etcd {

// gRPC codes the gateway puts in its error bodies (google.golang.org/grpc/codes).
enum GrpcCode : int {
  kGrpcCancelled = 1,
  kGrpcDeadlineExceeded = 4,   // etcd: "request timed out" (no commit in time)
  kGrpcNotFound = 5,           // etcd: "requested lease not found"
  kGrpcResourceExhausted = 8,  // etcd: "too many requests"
  kGrpcOutOfRange = 11,        // etcd: "required revision has been compacted"
  kGrpcUnavailable = 14,       // etcd: "no leader", "leader changed", "server stopped", ...
  kGrpcUnauthenticated = 16,
};

// The gRPC codes after which another member (or the same one a moment later) may well answer.
bool grpc_code_is_transient(int code);

struct ReplyVerdict {
  enum class Kind {
    Answer,      // a 200 with a JSON object that is not an error: etcd's answer
    NextMember,  // try another member: the member is sick, busy, leaderless, or not etcd at all
    Refused,     // etcd's final answer to this request (bad request, lease not found, auth ...)
  };
  Kind kind = Kind::Answer;
  // The member is etcd and answered, but could not serve the request now (no leader, timed
  // out, too busy): it is alive. False for a proxy's or another service's answer.
  bool etcd_answered = false;
  int grpc_code = 0;  // the gateway's code, 0 when the body was not its error
  // Answer: the answering member's cluster (its response header's cluster_id), empty when the
  // reply has none. The client compares it with the cluster the job settled on.
  std::string cluster_id;
  // Not Answer: what the member answered, e.g. "HTTP 503 (gRPC 14 Unavailable): etcdserver:
  // no leader" or "HTTP 200 with a body that is not JSON (not etcd's v3 JSON gateway?)".
  std::string line;
};

ReplyVerdict classify_reply(unsigned http_status, std::string_view body);

}  // namespace ddp::rdzv::etcd
