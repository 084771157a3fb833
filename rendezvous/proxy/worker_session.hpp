#pragma once

// One worker's connection to the store proxy (a torch 1.13 = G1 or 2.x = G2 client). Decodes its
// requests, hands them to the Core, and answers in request order through reply slots.
//
// Everything it holds is bounded: owed replies, sent or held behind an unanswered earlier one
// (a WAIT), by --max-pending-output-bytes (past it nothing more is read; a reply arriving while
// past it closes this worker only, as the store does); requests outstanding by
// kMaxOutstandingRequests; a request by --max-request-bytes; blocking requests (WAIT, BARRIER)
// to one at a time. One write at a time on its socket. A request the proxy refuses (ddprun's own
// extensions, a G1 WATCH_KEY, a reserved key) closes this worker with one line, never the link
// it shares with the others.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/codec.hpp"
#include "rendezvous/proxy/proxy_core.hpp"

namespace ddp::rdzv::proxy {

class BarrierLink;

class WorkerSession : public std::enable_shared_from_this<WorkerSession> {
 public:
  static constexpr std::size_t kMaxOutstandingRequests = 4096;

  WorkerSession(boost::asio::ip::tcp::socket s, std::shared_ptr<StoreProxy::Core> core);

  void start();
  // Reply slots: every request with a reply takes the next slot; answers leave in slot order.
  std::uint64_t take_slot();
  void fill(std::uint64_t slot, std::string_view bytes);
  void close(std::string_view why = {});
  bool closed() const { return closed_; }
  // In the middle of a request, or owed output it does not read: what --idle-timeout bounds.
  bool stalled_since(std::chrono::steady_clock::time_point limit) const;
  // Read again (the link's queue drained).
  void resume() {
    paused_ = false;
    arm_read();
  }
  // Bytes this connection holds: owed replies (sent or not) and input not yet decoded.
  std::size_t held_bytes() const;

  // The sequence of this worker's last write on the link (its later requests go behind it).
  std::uint64_t last_write_seq = 0;
  // Its WAIT or BARRIER not answered yet (one at a time) and the slot it answers.
  std::shared_ptr<Entry> blocking;
  std::uint64_t blocking_slot = 0;
  std::shared_ptr<BarrierLink> barrier_link;

  // The blocking request was answered (or is given up): forget it.
  void blocking_done();

 private:
  void arm_read();
  void on_bytes(std::string_view data);
  void decode(std::string_view data);
  void handle(Command&& cmd);
  void flush();
  void drop_blocking();

  boost::asio::ip::tcp::socket socket_;
  std::shared_ptr<StoreProxy::Core> core_;
  std::string in_;  // before the generation is known
  Generation gen_ = Generation::G2;
  std::optional<RequestDecoder> decoder_;
  bool first_request_ = true;
  std::deque<std::optional<std::string>> slots_;
  std::uint64_t slot_base_ = 0;
  std::size_t slot_bytes_ = 0;  // replies held in slots_ behind an unanswered one
  std::string out_;             // owed, not being written
  std::string writing_;         // being written (one async_write at a time)
  bool reading_ = false;
  bool paused_ = false;  // in the Core's list of workers to resume once the link drains
  bool closed_ = false;
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
};

}  // namespace ddp::rdzv::proxy
