#pragma once

// One accepted TCP connection of the store server: buffers input, classifies the connection as
// G1 or G2, decodes requests and queues replies. Reads land in a small inline buffer and bursts
// continue through one shared scratch buffer, so idle connections stay cheap; replies are
// written directly and only fall back to waiting when the peer is not reading.

#include <array>
#include <cstddef>
#include <memory>
#include <string>

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
  // Bytes buffered by all sessions changed by `delta`; returns the new total.
  virtual std::size_t note_input_bytes(std::ptrdiff_t delta) = 0;
  // One line about a connection closed for cause (the host rate-limits them).
  virtual void log_closed_for_error(const std::string& line) = 0;
};

class StoreSession : public std::enable_shared_from_this<StoreSession> {
 public:
  StoreSession(boost::asio::ip::tcp::socket socket, ClientId id, std::shared_ptr<SessionHost> host);

  void start();
  void send(std::string_view bytes);
  // Close without logging (normal end or server stop).
  void close();
  // Close and write one log line naming the peer and the reason.
  void close_for_error(std::string_view reason);

  ClientId id() const { return id_; }
  bool is_open() const { return !closed_; }

 private:
  void arm_read();
  void on_read(const boost::system::error_code& ec, std::size_t n);
  void process_input();
  void flush();
  void on_writable(const boost::system::error_code& ec);
  bool output_backlogged() const;
  std::string describe_peer() const;
  void finish(bool for_error);
  // Report in_'s size change to the host; false if the server-wide input budget is exhausted and
  // this connection holds a large unfinished request.
  bool account_input();

  boost::asio::ip::tcp::socket socket_;
  ClientId id_;
  std::shared_ptr<SessionHost> host_;

  ConnectionKind kind_ = ConnectionKind::Undetermined;
  bool first_request_ = true;
  // Small per-connection landing area for the first bytes of a read; larger bursts continue
  // through the server's shared scratch buffer, so an idle connection costs little memory.
  std::array<char, 256> first_bytes_{};
  // Once a read has filled first_bytes_ (the peer sends requests larger than it, e.g. torchrun's
  // ~500-byte rendezvous state), reads land here instead: one recv per request again, where the
  // small buffer needed two or three. Idle connections with small requests never allocate it.
  std::unique_ptr<char[]> large_read_;
  bool read_into_large_ = false;  // which buffer the armed read targets
  std::string in_;
  std::size_t in_pos_ = 0;     // start of unparsed input in in_
  std::size_t need_total_ = 0;  // decoder hint: unparsed bytes needed before the next attempt
  std::size_t accounted_input_ = 0;  // in_.size() as last reported to the host

  std::string out_;               // replies not yet accepted by the socket, from out_off_
  std::size_t out_off_ = 0;
  bool write_in_flight_ = false;  // waiting for the socket to become writable
  bool batching_replies_ = false;  // inside process_input: send() queues, the end flushes once
  bool read_armed_ = false;
  bool closed_ = false;
};

}  // namespace ddp::rdzv
