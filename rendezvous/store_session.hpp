#pragma once

// One accepted TCP connection of the store server: classifies the connection as G1 or G2, feeds
// what it reads to an incremental decoder, hands complete requests to the host and queues
// replies. Reads land in a small inline buffer and bursts continue through one shared scratch
// buffer, so idle connections stay cheap; replies are written directly and only fall back to
// waiting when the peer is not reading.
//
// Bounds (see StoreLimits): the bytes it holds for unfinished requests and the output it is owed
// are reported to the host, which enforces the server-wide totals; a message for a connection
// already owed --max-pending-output-bytes closes it; an allocation failure while serving it
// closes it (the server keeps serving the others).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/codec.hpp"
#include "rendezvous/store_model.hpp"

namespace ddp::rdzv {

class StoreSession;

// What a session needs from the server that owns it.
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual const StoreLimits& limits() const = 0;
  virtual std::string& scratch_buffer() = 0;  // shared read buffer, only used synchronously
  virtual void handle(StoreSession& session, Generation gen, Command&& cmd, bool first_request) = 0;
  virtual void session_closed(ClientId id, bool for_error) = 0;
  // The bytes `session` holds for unfinished requests, or is owed as output, changed by `delta`.
  // Growth may take a server-wide total past its limit; the host then closes the connection
  // holding the most (which may be `session`).
  virtual void input_bytes_changed(StoreSession& session, std::ptrdiff_t delta) = 0;
  virtual void output_bytes_changed(StoreSession& session, std::ptrdiff_t delta) = 0;
  // A coarse clock for --idle-timeout: advanced by the host's sweep timer.
  virtual std::uint64_t progress_tick() const = 0;
  // One line about a connection closed for cause (the host rate-limits them).
  virtual void log_closed_for_error(const std::string& line) = 0;
};

class StoreSession : public std::enable_shared_from_this<StoreSession> {
 public:
  StoreSession(boost::asio::ip::tcp::socket socket, ClientId id, std::shared_ptr<SessionHost> host);

  void start();
  // What a message to the peer is. On a tagged connection (ddprun's TAGGED extension,
  // docs/protocol.md) send() prefixes every message with its kind's tag: the one place tags
  // are written. Elsewhere the kind changes nothing.
  enum class Message : std::uint8_t { Reply, Event };
  void send(std::string_view bytes, Message kind = Message::Reply);
  // From the next send() on, every message carries its tag (TAGGED was accepted).
  void tag_messages() { tagged_ = true; }
  bool tagged() const { return tagged_; }
  // Close without logging (normal end or server stop).
  void close();
  // Close and write one log line naming the peer and the reason.
  void close_for_error(std::string_view reason);

  ClientId id() const { return id_; }
  bool is_open() const { return !closed_; }
  std::size_t held_input_bytes() const { return accounted_input_; }
  std::size_t pending_output_bytes() const { return out_.size() - out_off_; }
  // In the middle of a request, or owed output: the states --idle-timeout applies to. A client
  // between requests (e.g. blocked in WAIT) is not waited on for anything.
  bool awaiting_progress() const;
  std::uint64_t last_progress_tick() const { return last_progress_tick_; }

 private:
  void arm_read();
  void on_read(const boost::system::error_code& ec, std::size_t n);
  void read_and_process(const boost::system::error_code& ec, std::size_t n);
  // Newly read bytes: decoded at once, or kept in in_ while the connection is unclassified or
  // its earlier input is held back.
  void on_bytes(std::string_view data);
  void process_held_input();
  // Feed `data` to the decoder and handle each complete request; stops early when the
  // connection closes or is backlogged. Returns the bytes used.
  std::size_t decode(std::string_view data);
  void flush();
  // Close at once without a log line, counted as closed for cause: a reset if output is still
  // owed (it never reached the peer's kernel), else gracefully.
  void close_now();
  void on_writable(const boost::system::error_code& ec);
  // Once the output owed is small again: handle the requests held back, then read again.
  void resume_reading();
  bool output_backlogged() const;
  std::string describe_peer() const;
  void log_closing(std::string_view reason);  // "closing connection from PEER (GEN): reason"
  void fail_out_of_memory();
  void finish(bool for_error);
  void account_input();
  void account_output();

  boost::asio::ip::tcp::socket socket_;
  ClientId id_;
  std::shared_ptr<SessionHost> host_;
  const StoreLimits& limits_;  // the host's, which outlives its sessions

  ConnectionKind kind_ = ConnectionKind::Undetermined;
  std::optional<RequestDecoder> decoder_;  // created once the generation is known
  bool first_request_ = true;
  // Small per-connection landing area for the first bytes of a read; larger bursts continue
  // through the server's shared scratch buffer, so an idle connection costs little memory.
  std::array<char, 256> first_bytes_{};
  // Once a read has filled first_bytes_ (the peer sends requests larger than it, e.g. torchrun's
  // ~500-byte rendezvous state), reads land here instead: one recv per request again, where the
  // small buffer needed two or three. Idle connections with small requests never allocate it.
  std::unique_ptr<char[]> large_read_;
  bool read_into_large_ = false;  // which buffer the armed read targets
  // Bytes read but not yet decoded: the first bytes of an unclassified connection, or input
  // held back while the peer does not read its replies (at most one read burst).
  std::string in_;
  std::size_t accounted_input_ = 0;   // in_ + the decoder's held bytes, as last reported
  std::size_t accounted_output_ = 0;  // pending_output_bytes(), as last reported
  std::uint64_t last_progress_tick_ = 0;

  std::string out_;  // replies not yet accepted by the socket, from out_off_
  std::size_t out_off_ = 0;
  bool write_in_flight_ = false;   // waiting for the socket to become writable
  bool batching_replies_ = false;  // while handling a read: send() queues, the end flushes once
  bool read_armed_ = false;
  bool closed_ = false;
  bool tagged_ = false;
};

}  // namespace ddp::rdzv
