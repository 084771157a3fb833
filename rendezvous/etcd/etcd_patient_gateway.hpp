#pragma once

// A gateway that waits out an etcd election during a join. While a deadline is set (the join's),
// a call that fails with EtcdUnavailable while etcd still answers (no leader, "leader changed", a
// request that timed out: the members are up but cannot commit yet) is tried again after a short
// pause, until that deadline; a leader killed while the agents join costs the join the election,
// not the job (before: 69 at the first call's deadline, min(read_timeout, heartbeat_timeout)).
// When no member answers at all (nothing listening), or no deadline is set, the error goes to
// the caller at once.
//
// Retrying is safe for the protocol's calls: reads and waits are idempotent, a put writes the
// same value again, and each txn compares revisions, so one that did commit before its reply was
// lost fails its compare when repeated and the caller re-reads.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/etcd/etcd_gateway.hpp"

namespace ddp::rdzv::etcd {

class EtcdUnavailable;  // etcd_client.hpp

class PatientGateway final : public EtcdGateway {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    std::function<Clock::time_point()> now;
    std::function<void(std::chrono::milliseconds)> sleep;
    std::function<bool()> cancelled;
    // Once per outage (the first retry after a success): what etcd answered.
    std::function<void(const std::string& why)> on_waiting;
  };

  PatientGateway(std::unique_ptr<EtcdGateway> inner, Hooks hooks)
      : inner_(std::move(inner)), hooks_(std::move(hooks)) {}

  // Retries until `deadline`; nullopt: none (every error goes to the caller).
  void patient_until(std::optional<Clock::time_point> deadline) { deadline_ = deadline; }

  RangeReply range(const std::string& key, const std::string& range_end = {},
                   bool keys_only = false) override;
  std::int64_t put(const std::string& key, const std::string& value,
                   std::int64_t lease = 0) override;
  std::int64_t erase(const std::string& key, const std::string& range_end = {}) override;
  TxnReply txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
               const std::vector<Op>& failure = {}) override;
  LeaseGrant grant_lease(std::int64_t ttl_seconds) override;
  std::int64_t keep_alive(std::int64_t lease) override;
  void revoke_lease(std::int64_t lease) override;
  std::vector<WatchEvent> wait_for_change(const std::string& key, const std::string& range_end,
                                          std::int64_t start_revision,
                                          std::chrono::milliseconds wait) override;
  bool any_member_answers() override { return inner_->any_member_answers(); }
  void check_one_cluster(std::chrono::milliseconds within) override {
    inner_->check_one_cluster(within);
  }
  std::size_t current_member() const override { return inner_->current_member(); }

 private:
  // Whether the failure `e` of a call is to be retried (and after the pause): etcd answers, the
  // deadline is ahead, the join was not cancelled.
  bool wait_out(const EtcdUnavailable& e);
  template <class F>
  auto patiently(F&& call) -> decltype(call());

  std::unique_ptr<EtcdGateway> inner_;
  Hooks hooks_;
  std::optional<Clock::time_point> deadline_;
  bool waiting_ = false;  // said for this outage
};

}  // namespace ddp::rdzv::etcd
