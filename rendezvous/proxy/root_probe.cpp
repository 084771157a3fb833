// tagged_mode_refusal(): one short connection asking the root for ddprun's tagged mode, the way
// the proxy's link does, to decide whether the workers go through the proxy at all.
#include <fmt/format.h>

#include "rendezvous/blocking_socket.hpp"
#include "rendezvous/codec.hpp"
#include "rendezvous/proxy/store_proxy.hpp"
#include "rendezvous/store_errors.hpp"

namespace ddp::rdzv::proxy {

std::optional<std::string> tagged_mode_refusal(const std::string& host, std::uint16_t port,
                                               std::chrono::milliseconds timeout) {
  const auto deadline = BlockingSocket::Clock::now() + timeout;
  BlockingSocket socket;
  try {
    socket = BlockingSocket::connect(host, port, deadline);
  } catch (const StoreError& e) {
    throw std::runtime_error(
        fmt::format("cannot reach the root store {}:{}: {}", host, port, e.what()));
  }
  try {
    socket.send_all(
        encode_request(Generation::G2, Command{Op::Validate, {}, {}, 0, kValidateMagic}) +
            encode_request(Generation::G2, Command{Op::Tagged, {}, {}, 0, kTaggedVersion}),
        deadline);
    const auto tag = socket.recv_u8(deadline);
    const auto answer = socket.recv_u8(deadline);
    if (tag == kTagReply && answer == kTaggedOn) return std::nullopt;
    return fmt::format("it answered TAGGED with 0x{:02x} 0x{:02x}", tag, answer);
  } catch (const StoreTimeoutError&) {
    return fmt::format("no answer to TAGGED within {} ms", timeout.count());
  } catch (const StoreError& e) {
    return fmt::format("it closed the connection on TAGGED ({})", e.what());
  }
}

}  // namespace ddp::rdzv::proxy
