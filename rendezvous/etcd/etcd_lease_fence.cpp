#include "rendezvous/etcd/etcd_lease_fence.hpp"

#include <fmt/format.h>

namespace ddp::rdzv::etcd {

namespace {
double seconds(LeaseFence::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
std::string with_detail(std::string line, const std::string& detail) {
  if (!detail.empty()) line += fmt::format("; last try: {}", detail);
  return line;
}
}  // namespace

LeaseFence::LeaseFence(std::chrono::seconds granted_ttl, Clock::time_point start)
    : ttl_(granted_ttl), renewed_(start), answered_(start) {}

std::optional<std::string> LeaseFence::note(Outcome outcome, Clock::time_point now,
                                            const std::string& detail) {
  switch (outcome) {
    case Outcome::Renewed:
      renewed_ = answered_ = now;
      return std::nullopt;
    case Outcome::Gone:
      return with_detail(
          "etcd says this node's lease is gone (it expired or was revoked: etcd "
          "took this node for lost)",
          detail);
    case Outcome::NotRenewed:
      answered_ = now;
      if (now - renewed_ >= leaderless_bound()) {
        return with_detail(fmt::format("etcd answered but renewed this node's lease for {:.3g} s "
                                       "(3 x its TTL of {} s: no leader, quorum lost?)",
                                       seconds(now - renewed_), ttl_.count()),
                           detail);
      }
      return std::nullopt;
    case Outcome::NoAnswer:
      if (now - answered_ >= ttl_) {
        return with_detail(fmt::format("no member of etcd answered for {:.3g} s (the lease's TTL "
                                       "is {} s)",
                                       seconds(now - answered_), ttl_.count()),
                           detail);
      }
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace ddp::rdzv::etcd
