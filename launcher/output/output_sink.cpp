// SPDX-License-Identifier: MIT
#include "launcher/output/output_sink.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace ddp::launcher {
namespace {

constexpr int kOutputPipeBytes = 1 << 20;
constexpr size_t kKeepCapacity = size_t{64} * 1024;  // an idle sink gives back larger buffers

/// A second, non-blocking open file description of `fd` (pipe or terminal), or -1.
int reopen_non_blocking(int fd) {
  return ::open(fmt::format("/proc/self/fd/{}", fd).c_str(),
                O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
}

std::vector<OutputSink*>& live_sinks() {
  static std::vector<OutputSink*> sinks;
  return sinks;
}

std::vector<std::shared_ptr<OutputSink>>& retired_sinks() {
  static std::vector<std::shared_ptr<OutputSink>> sinks;
  return sinks;
}

void release_if_large(std::string& buffer) {
  if (buffer.empty() && buffer.capacity() > kKeepCapacity) std::string().swap(buffer);
}

}  // namespace

/// The writer thread's side of a Thread-mode sink. `buffer` belongs to the thread while a job
/// is queued or running, to the loop otherwise. `owner` is touched on the loop only.
struct OutputSink::Shared {
  std::mutex mutex;
  bool cancelled = false;  // under mutex: the loop (or its io_context) may be gone
  boost::asio::io_context::executor_type executor;
  int fd;
  std::string buffer;
  OutputSink* owner;
  Shared(boost::asio::io_context& io, int fd, OutputSink* owner)
      : executor(io.get_executor()), fd(fd), owner(owner) {}
};

namespace {

/// One thread for every sink whose descriptor cannot be written without blocking. Never joined:
/// a write stuck on a dead NFS server must not keep ddprun from exiting.
class WriterThread {
 public:
  using Job = std::function<void()>;
  static WriterThread& instance() {
    static WriterThread* writer = new WriterThread;  // intentionally never destroyed
    return *writer;
  }
  void push(Job job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
  }

 private:
  WriterThread() {
    // Signals stay with the loop thread (Asio's signal_sets).
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    std::thread([this] { run(); }).detach();
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  [[noreturn]] void run() {
    while (true) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
};

/// Blocking write of all of `data` (waiting out EAGAIN should the description be non-blocking).
/// Returns 0 or errno; `written` is what went out.
int write_blocking(int fd, const std::string& data, size_t& written, const bool& cancelled,
                   std::mutex& mutex) {
  written = 0;
  while (written < data.size()) {
    ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      std::lock_guard lock(mutex);
      if (cancelled) return ECANCELED;
      continue;
    }
    return n < 0 ? errno : EIO;
  }
  return 0;
}

}  // namespace

bool write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}

OutputSink::OutputSink(boost::asio::io_context& io, int fd, bool owns_fd)
    : fd_(fd), owns_fd_(owns_fd), tty_(::isatty(fd) == 1), io_(io) {
  live_sinks().push_back(this);
  struct stat st {};
  const bool known = ::fstat(fd, &st) == 0;
  // When the console is a pipe (ddprun ... | tee log), a larger pipe buffer means far fewer
  // writes and context switches for the same data. Best effort; the reader is unaffected.
  if (known && S_ISFIFO(st.st_mode) && ::fcntl(fd, F_GETPIPE_SZ) < kOutputPipeBytes) {
    ::fcntl(fd, F_SETPIPE_SZ, kOutputPipeBytes);
  }
  if (known && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
    own_fd_ = reopen_non_blocking(fd);
    if (own_fd_ >= 0) mode_ = Mode::NonBlocking;
  } else if (known && S_ISSOCK(st.st_mode)) {
    // A socket cannot be reopened; MSG_DONTWAIT makes each send non-blocking without touching
    // the description the shell shares with us. The dup is only watched for writability.
    own_fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own_fd_ >= 0) mode_ = Mode::Socket;
  }
  if (own_fd_ >= 0) {
    watch_.emplace(io, own_fd_);
  } else {
    mode_ = Mode::Thread;
    shared_ = std::make_shared<Shared>(io, fd, this);
  }
}

OutputSink::~OutputSink() {
  *alive_ = false;
  std::erase(live_sinks(), this);
  bool thread_holds_fd = false;
  if (shared_) {
    std::lock_guard lock(shared_->mutex);
    shared_->cancelled = true;
    shared_->owner = nullptr;
    thread_holds_fd = in_flight_ > 0;
  }
  watch_.reset();  // closes own_fd_
  // A write stuck in the writer thread keeps the descriptor (ddprun is about to exit anyway).
  if (!thread_holds_fd) close_fd();
}

void OutputSink::close_fd() {
  if (owns_fd_ && !closed_ && fd_ >= 0) ::close(fd_);
  closed_ = true;
}

ssize_t OutputSink::try_write(const char* data, size_t size) {
  if (mode_ == Mode::Socket) return ::send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
  return ::write(own_fd_, data, size);
}

void OutputSink::write_all(std::string_view data) {
  if (failed_ || data.empty()) return;
  if (mode_ == Mode::Thread) {
    pending_.append(data);
    if (in_flight_ == 0) submit();
    return;
  }
  if (queued() == 0) {  // fast path: straight out, queue only the rest
    pending_.clear();
    head_ = 0;
    while (!data.empty()) {
      ssize_t n = try_write(data.data(), data.size());
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        fail(n < 0 ? errno : EIO, std::string(data));
        return;
      }
    }
    if (data.empty()) return;
  }
  pending_.append(data);
  arm();
}

void OutputSink::flush_some() {
  while (head_ < pending_.size()) {
    ssize_t n = try_write(pending_.data() + head_, pending_.size() - head_);
    if (n > 0) {
      head_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    fail(n < 0 ? errno : EIO, pending_.substr(head_));
    return;
  }
  if (queued() == 0) {
    pending_.clear();
    head_ = 0;
    release_if_large(pending_);
  } else if (head_ > (1u << 20) && head_ > pending_.size() / 2) {
    pending_.erase(0, head_);  // keep the buffer from growing without bound
    head_ = 0;
  }
  if (queued() < kHighWater / 2) wake_waiters();
}

void OutputSink::arm() {
  if (armed_ || failed_) return;
  armed_ = true;
  watch_->async_wait(boost::asio::posix::stream_descriptor::wait_write,
                     [this, alive = alive_](const boost::system::error_code& ec) {
                       if (!*alive) return;
                       armed_ = false;
                       if (ec || failed_) return;
                       flush_some();
                       if (queued() > 0) arm();
                     });
}

void OutputSink::submit() {
  shared_->buffer.swap(pending_);
  pending_.clear();
  in_flight_ = shared_->buffer.size();
  WriterThread::instance().push([shared = shared_] {
    size_t written = 0;
    int error =
        write_blocking(shared->fd, shared->buffer, written, shared->cancelled, shared->mutex);
    std::lock_guard lock(shared->mutex);
    if (shared->cancelled) return;  // the loop (and perhaps its io_context) is gone
    boost::asio::post(shared->executor, [shared, error, written] {
      if (shared->owner) shared->owner->on_written(error, written);
    });
  });
}

void OutputSink::on_written(int error, size_t written) {
  in_flight_ = 0;
  std::string& done = shared_->buffer;
  if (error != 0) {
    std::string unwritten = done.substr(std::min(written, done.size()));
    unwritten += pending_;
    done.clear();
    fail(error, std::move(unwritten));
    return;
  }
  done.clear();
  release_if_large(done);
  if (!pending_.empty()) {
    submit();
  } else {
    release_if_large(pending_);
  }
  if (queued() < kHighWater / 2) wake_waiters();
  if (idle()) {
    // A retired log file is complete: close it and let it go.
    auto& retired = retired_sinks();
    auto it = std::find_if(retired.begin(), retired.end(),
                           [this](const auto& s) { return s.get() == this; });
    if (it != retired.end()) {
      close_fd();
      auto keep = std::move(*it);  // destroyed after the erase, outside the vector
      retired.erase(it);
    }
  }
}

void OutputSink::fail(int error, std::string unwritten) {
  failed_ = true;
  pending_.clear();
  head_ = 0;
  in_flight_ = 0;
  if (watch_) {
    boost::system::error_code ignored;
    watch_->cancel(ignored);
  }
  if (on_error_) {
    // Posted: the handler may write to other sinks, and we may be inside one of their writes.
    boost::asio::post(io_, [handler = std::move(on_error_), error, alive = alive_,
                            rest = std::move(unwritten)]() mutable {
      if (*alive) handler(error, std::move(rest));
    });
  }
  on_error_ = nullptr;
  close_fd();  // a log file that failed is done with
  wake_waiters();
}

void OutputSink::write_lines(const void* writer, std::string_view data, bool line_open) {
  if (line_owner_ != nullptr && line_owner_ != writer) {
    // Another writer's line is open: this waits after it (and after what others hold).
    if (!held_.empty() && held_.back().writer == writer && !held_.back().line_open) {
      held_.back().data.append(data);
      held_.back().line_open = line_open;
    } else {
      held_.push_back(Held{writer, std::string(data), line_open});
    }
    notify_waited();
    return;
  }
  if (!data.empty()) write_all(data);
  const bool released = line_owner_ == writer && !line_open;
  line_owner_ = line_open ? writer : nullptr;
  if (!line_open) line_closed(writer);
  if (released) flush_held();
}

void OutputSink::flush_held() {
  // In order; a writer's later output stays behind its first entry that cannot go yet, and an
  // entry that opens a line makes its writer the owner (its own next entries follow it).
  std::vector<Held> kept;
  std::vector<const void*> blocked;
  for (auto& h : held_) {
    const bool behind = std::find(blocked.begin(), blocked.end(), h.writer) != blocked.end();
    if (!behind && (line_owner_ == nullptr || line_owner_ == h.writer)) {
      if (!h.data.empty()) write_all(h.data);
      line_owner_ = h.line_open ? h.writer : nullptr;
      if (!h.line_open) line_closed(h.writer);
    } else {
      if (!behind) blocked.push_back(h.writer);
      kept.push_back(std::move(h));
    }
  }
  held_ = std::move(kept);
  notify_waited();  // a held line that owns the console now may have others behind it
  // Writers that hold nothing any more read again.
  auto waiting = std::move(release_waiters_);
  release_waiters_.clear();
  for (auto& [writer, resume] : waiting) {
    if (holding(writer)) {
      release_waiters_.emplace_back(writer, std::move(resume));
    } else {
      resume();
    }
  }
}

void OutputSink::when_waited_on(const void* owner, std::function<void()> notify) {
  line_closed(owner);
  on_waited_.emplace_back(owner, std::move(notify));
  notify_waited();
}

void OutputSink::line_closed(const void* writer) {
  std::erase_if(on_waited_, [&](const auto& entry) { return entry.first == writer; });
}

void OutputSink::notify_waited() {
  if (line_owner_ == nullptr || on_waited_.empty()) return;
  const bool waited_on = std::any_of(held_.begin(), held_.end(),
                                     [&](const Held& h) { return h.writer != line_owner_; });
  if (!waited_on) return;
  auto it = std::find_if(on_waited_.begin(), on_waited_.end(),
                         [&](const auto& entry) { return entry.first == line_owner_; });
  if (it == on_waited_.end()) return;
  boost::asio::post(io_, std::move(it->second));
  on_waited_.erase(it);
}

bool OutputSink::holding(const void* writer) const {
  for (const auto& h : held_) {
    if (h.writer == writer) return true;
  }
  return false;
}

void OutputSink::when_released(const void* writer, std::function<void()> resume) {
  if (!holding(writer)) return resume();
  release_waiters_.emplace_back(writer, std::move(resume));
}

void OutputSink::when_drained(std::function<void()> resume) {
  if (!congested() || failed_) {
    resume();
    return;
  }
  waiters_.push_back(std::move(resume));
}

void OutputSink::wake_waiters() {
  if (waiters_.empty()) return;
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& resume : waiters) resume();
}

void OutputSink::retire(std::shared_ptr<OutputSink> sink) {
  if (!sink) return;
  if (sink->idle() || sink->failed()) {
    sink->close_fd();
    return;
  }
  retired_sinks().push_back(std::move(sink));
}

size_t OutputSink::drain_all(boost::asio::io_context& io, std::chrono::milliseconds stall,
                             std::chrono::milliseconds limit) {
  using Clock = std::chrono::steady_clock;
  auto busy = [] {
    size_t total = 0;
    for (const OutputSink* s : live_sinks()) total += s->failed_ ? 0 : s->queued();
    return total;
  };
  io.restart();
  auto guard = boost::asio::make_work_guard(io);
  const auto start = Clock::now();
  auto last_progress = start;
  size_t last = busy();
  while (last > 0) {
    const auto now = Clock::now();
    if (now - last_progress >= stall || now - start >= limit) break;
    io.run_one_for(std::chrono::milliseconds(50));
    const size_t left = busy();
    if (left != last) last_progress = Clock::now();
    last = left;
  }
  guard.reset();
  // Give up on whatever is left: the writer thread must never post to `io` again.
  size_t lost = 0;
  for (OutputSink* s : live_sinks()) {
    if (s->failed_ || s->idle()) continue;
    lost += s->queued();
    if (s->shared_) {
      std::lock_guard lock(s->shared_->mutex);
      s->shared_->cancelled = true;
    }
    s->failed_ = true;
  }
  retired_sinks().clear();
  return lost;
}

}  // namespace ddp::launcher
