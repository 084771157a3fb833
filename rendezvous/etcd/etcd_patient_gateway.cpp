#include "rendezvous/etcd/etcd_patient_gateway.hpp"

#include <algorithm>
#include <type_traits>

#include "rendezvous/etcd/etcd_client.hpp"

namespace ddp::rdzv::etcd {
namespace {

// Between two tries: each failed try already took up to the call's deadline when members hang,
// so the pause only keeps quick refusals ("no leader" at once) from spinning.
constexpr std::chrono::milliseconds kRetryPause{250};

}  // namespace

bool PatientGateway::wait_out(const EtcdUnavailable& e) {
  if (!deadline_ || (hooks_.cancelled && hooks_.cancelled())) return false;
  const auto left = *deadline_ - hooks_.now();
  if (left <= Clock::duration::zero()) return false;
  // Nothing answers at all: not an election, and nothing to wait for.
  if (!e.etcd_answered() && !inner_->any_member_answers()) return false;
  if (!waiting_ && hooks_.on_waiting) hooks_.on_waiting(e.what());
  waiting_ = true;
  hooks_.sleep(std::min<std::chrono::milliseconds>(
      kRetryPause, std::chrono::duration_cast<std::chrono::milliseconds>(left)));
  return true;
}

template <class F>
auto PatientGateway::patiently(F&& call) -> decltype(call()) {
  while (true) {
    try {
      if constexpr (std::is_void_v<decltype(call())>) {
        call();
        waiting_ = false;
        return;
      } else {
        auto result = call();
        waiting_ = false;
        return result;
      }
    } catch (const EtcdUnavailable& e) {
      if (!wait_out(e)) throw;
    }
  }
}

RangeReply PatientGateway::range(const std::string& key, const std::string& range_end,
                                 bool keys_only) {
  return patiently([&] { return inner_->range(key, range_end, keys_only); });
}

std::int64_t PatientGateway::put(const std::string& key, const std::string& value,
                                 std::int64_t lease) {
  return patiently([&] { return inner_->put(key, value, lease); });
}

std::int64_t PatientGateway::erase(const std::string& key, const std::string& range_end) {
  return patiently([&] { return inner_->erase(key, range_end); });
}

TxnReply PatientGateway::txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                             const std::vector<Op>& failure) {
  return patiently([&] { return inner_->txn(compares, success, failure); });
}

LeaseGrant PatientGateway::grant_lease(std::int64_t ttl_seconds) {
  // A grant whose reply was lost leaves a lease nobody renews: it expires by itself.
  return patiently([&] { return inner_->grant_lease(ttl_seconds); });
}

std::int64_t PatientGateway::keep_alive(std::int64_t lease) {
  return patiently([&] { return inner_->keep_alive(lease); });
}

void PatientGateway::revoke_lease(std::int64_t lease) {
  patiently([&] { inner_->revoke_lease(lease); });
}

std::vector<WatchEvent> PatientGateway::wait_for_change(const std::string& key,
                                                        const std::string& range_end,
                                                        std::int64_t start_revision,
                                                        std::chrono::milliseconds wait) {
  return patiently([&] { return inner_->wait_for_change(key, range_end, start_revision, wait); });
}

}  // namespace ddp::rdzv::etcd
