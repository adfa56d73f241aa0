// One rank's side of an mpi_comm: the two duplicated MPI communicators (one for data, one for
// control messages), and the control protocol around every collective. Each collective starts by
// sending its description to every peer (in debug mode the descriptions are compared before any
// data moves); every MPI request is polled against a deadline that moves with progress; a failure
// (a timeout, an MPI error, abort()) sends an abort notice to every peer and fails the endpoint.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../communicator.hpp"
#include "../mpi_session.hpp"
#include "progress.hpp"

namespace meld::detail::distributed {

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else
    return MPI_UINT8_T;
}

inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return MPI_SUM;
    case reduce_op::max:
      return MPI_MAX;
    case reduce_op::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

inline std::recursive_mutex& mpi_mutex() {
  static std::recursive_mutex m;
  return m;
}

inline constexpr int abort_tag = 1;
inline constexpr int header_tag_base = 2;
inline constexpr int tag_space = 30000;
inline constexpr std::size_t abort_text = 2048;

// Spin, then yield, then sleep for growing intervals (up to 1 ms); a deadline that moves when
// progress is made.
class backoff {
 public:
  explicit backoff(std::chrono::milliseconds timeout) : timeout_(timeout) { progressed(); }
  void progressed() {
    start_ = clock::now();
    rounds_ = 0;
  }
  bool expired() const { return clock::now() - start_ >= timeout_; }
  clock::duration waited() const { return clock::now() - start_; }
  void pause() {
    ++rounds_;
    if (rounds_ < 200) return;
    if (rounds_ < 2000) {
      std::this_thread::yield();
      return;
    }
    const auto us = std::min<long>(1000, 10L << std::min<long>(6, (rounds_ - 2000) / 100));
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

 private:
  std::chrono::milliseconds timeout_;
  clock::time_point start_;
  long rounds_ = 0;
};

class mpi_endpoint {
 public:
  mpi_endpoint(MPI_Comm comm, const resolved_options& opts) : opts_(opts) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      throw std::logic_error("mpi_comm: MPI is not initialized (use meld::mpi_session)");
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
      throw std::logic_error(
          "mpi_comm: MPI was initialized below MPI_THREAD_SERIALIZED; asynchronous collectives run "
          "on a progress thread (use meld::mpi_session or MPI_Init_thread with "
          "MPI_THREAD_MULTIPLE)");
    serialize_ = provided < MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    last_heard_.resize(static_cast<std::size_t>(size_));
    // Duplicate under the timeout: a rank that never constructs its communicator is reported.
    MPI_Request reqs[2];
    {
      auto lock = mpi_lock();
      MPI_Comm_idup(comm, &data_, &reqs[0]);
      MPI_Comm_idup(comm, &ctl_, &reqs[1]);
    }
    backoff wait(opts_.timeout);
    for (int flag = 0;;) {
      {
        auto lock = mpi_lock();
        MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE);
      }
      if (flag) {
        // Errors come back as codes (turned into comm_error), instead of aborting the job.
        auto lock = mpi_lock();
        MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(ctl_, MPI_ERRORS_RETURN);
        break;
      }
      if (wait.expired()) {
        mpi_failed().store(true);  // the duplications stay pending: MPI_Finalize would hang
        throw comm_error(
            comm_error::reason::timeout,
            cat("meld::mpi_comm rank ", rank_, ": constructing the communicator timed out after ",
                seconds_str(wait.waited()), ": not every rank constructed one (MPI_Comm_idup)"));
      }
      wait.pause();
    }
  }

  mpi_endpoint(const mpi_endpoint&) = delete;
  mpi_endpoint& operator=(const mpi_endpoint&) = delete;

  // A failed endpoint does not free MPI resources that could wait for dead peers.
  ~mpi_endpoint() {
    if (failed_.empty()) {
      auto lock = mpi_lock();
      MPI_Comm_free(&data_);
      MPI_Comm_free(&ctl_);
    }
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const resolved_options& options() const { return opts_; }
  // The duplicated communicator the data moves on.
  MPI_Comm data() const { return data_; }
  void* scratch(std::size_t bytes) { return scratch_.get(bytes); }

  bool failed() const {
    std::lock_guard lock(fail_mutex_);
    return !failed_.empty();
  }

  // Runs body(call) between the exchange of descriptions; refuses it if this endpoint failed or a
  // peer sent an abort notice.
  template <class F>
  void run(const call_info& call, F& body) {
    check_usable(call);
    try {
      announce(call);
      body(call);
      finish_announce(call);
    } catch (...) {
      // Receives still posted would write into memory that is about to be freed. (The header
      // sends read this endpoint's memory, which stays.)
      settle(header_reqs_.data(), std::min<int>(size_, static_cast<int>(header_reqs_.size())));
      throw;
    }
  }

  // Starts one non-blocking MPI operation (start(&request) returns MPI's error code) and polls it
  // to completion.
  template <class Start>
  void complete(const char* what, const call_info& call, Start start) {
    MPI_Request r;
    int rc;
    {
      auto lock = mpi_lock();
      rc = start(&r);
    }
    check(rc, what, call);
    try {
      poll(&r, 1, call, [what] { return cat(what, " did not complete"); });
    } catch (...) {
      settle(&r, 1, /*cancel=*/false);  // the operation reads and writes the caller's buffers
      throw;
    }
  }

  std::unique_lock<std::recursive_mutex> mpi_lock() const {
    return serialize_ ? std::unique_lock<std::recursive_mutex>(mpi_mutex())
                      : std::unique_lock<std::recursive_mutex>();
  }

  // Turns an MPI error code into comm_error (and fails the communicator).
  void check(int rc, const char* what, const call_info& call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    const std::string msg =
        cat("meld::mpi_comm rank ", rank_, ": ", call.str(), ": ", what, " failed: ", text);
    fail(comm_error::reason::backend, msg);
    throw comm_error(comm_error::reason::backend, msg);
  }

  // How long a failed collective waits for its transfers to settle (see settle()): half the
  // timeout, at most 2 s. Long enough for a live peer, which polls about every millisecond and
  // is told of the failure by a small message; short enough that a failure is still reported
  // within twice the timeout.
  std::chrono::milliseconds failure_grace() const {
    return std::min<std::chrono::milliseconds>(opts_.timeout / 2, std::chrono::seconds(2));
  }

  // After a failure, before the collective returns to a caller who may then free its buffers:
  // the requests that still read or write them. Receives are cancelled, so that a late message
  // cannot write into freed memory. A send cannot be recalled: Open MPI ignores MPI_Cancel of a
  // send, and a send that its peer has matched reads the buffer until it completes; so with
  // `cancel`, sends are cancelled where MPI can, and then every request is polled until it has
  // completed, for at most failure_grace(): time for a live peer to finish the transfer, or to
  // see the abort notice and cancel its receive. A send still pending after that has no live
  // receive: its peer is gone, stuck outside MPI, or failed, and a failed communicator posts no
  // more. (Requests of MPI's nonblocking collectives cannot be cancelled: cancel = false.)
  void settle(MPI_Request* reqs, int n, bool cancel = true) noexcept {
    if (n <= 0) return;
    if (cancel) {
      auto lock = mpi_lock();
      for (int i = 0; i < n; ++i)
        if (reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&reqs[i]);
    }
    const auto deadline = clock::now() + failure_grace();
    for (;;) {
      int flag = 0;
      {
        auto lock = mpi_lock();
        MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
      }
      if (flag || clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  static int checked_count(std::size_t n, const char* what) {
    if (n > static_cast<std::size_t>(INT_MAX))
      throw std::length_error(
          cat("mpi_comm::", what, ": ", n, " elements exceed MPI's int count; split the buffer"));
    return static_cast<int>(n);
  }

  template <class Describe>
  void poll(MPI_Request* reqs, int n, const call_info& call, Describe describe) {
    backoff wait(opts_.timeout);
    for (;;) {
      int flag = 0, rc;
      {
        auto lock = mpi_lock();
        rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
      }
      check(rc, "MPI_Testall", call);
      if (flag) return;
      check_abort_notices(call);
      if (wait.expired()) timed_out(call, wait.waited(), describe());
      wait.pause();
    }
  }

  [[noreturn]] void timed_out(const call_info& call, clock::duration waited,
                              const std::string& detail_text) {
    // Peers whose description of this collective has not arrived never entered it.
    std::vector<int> missing;
    {
      auto lock = mpi_lock();
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        int flag = 0;
        MPI_Test(&header_reqs_[static_cast<std::size_t>(q)], &flag, MPI_STATUS_IGNORE);
        if (!flag)
          missing.push_back(q);
        else
          last_heard_[static_cast<std::size_t>(q)] = headers_[static_cast<std::size_t>(q)];
      }
    }
    std::string msg = cat("meld::mpi_comm rank ", rank_, ": ", call.str(), " timed out after ",
                          seconds_str(waited), " without progress: ");
    if (!missing.empty()) {
      msg += ranks_str(missing) + " never arrived (last collective heard of:";
      for (std::size_t i = 0; i < missing.size(); ++i)
        msg += cat(i ? "; " : " ", "rank ", missing[i], ": ",
                   last_heard_[static_cast<std::size_t>(missing[i])].str());
      msg += ")";
    } else {
      msg += "every rank arrived";
      if (!detail_text.empty()) msg += ", " + detail_text;
    }
    fail(comm_error::reason::timeout, msg);
    throw comm_error(comm_error::reason::timeout, msg);
  }

  // Throws comm_error if a peer has sent an abort notice.
  void check_abort_notices(const call_info& call) {
    int flag = 0;
    MPI_Status status;
    {
      auto lock = mpi_lock();
      MPI_Iprobe(MPI_ANY_SOURCE, abort_tag, ctl_, &flag, &status);
      if (!flag) return;
      char text[abort_text] = {};
      MPI_Recv(text, static_cast<int>(sizeof(text) - 1), MPI_CHAR, status.MPI_SOURCE, abort_tag,
               ctl_, MPI_STATUS_IGNORE);
      mark_failed(text, comm_error::reason::aborted);
    }
    std::lock_guard lock(fail_mutex_);
    throw comm_error(fail_reason_,
                     cat("meld::mpi_comm rank ", rank_, ": ", call.str(), " failed: ", failed_));
  }

  // Marks the communicator failed and sends an abort notice to every peer (without waiting).
  void fail(comm_error::reason reason, const std::string& why) {
    mark_failed(why, reason);
    std::string text = why.substr(0, abort_text - 1);
    abort_text_.push_back(std::move(text));
    auto lock = mpi_lock();
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      MPI_Request r;
      MPI_Isend(abort_text_.back().c_str(), static_cast<int>(abort_text_.back().size() + 1),
                MPI_CHAR, q, abort_tag, ctl_, &r);
      MPI_Request_free(&r);
    }
  }

 private:
  int header_tag(std::uint64_t seq) const {
    return header_tag_base + static_cast<int>(seq % tag_space);
  }

  // Sends this collective's description to every peer and posts receives for theirs; in debug
  // mode, waits for them all and compares.
  void announce(const call_info& call) {
    const auto P = static_cast<std::size_t>(size_);
    my_call_ = call;
    headers_.assign(P, call_info{});
    header_reqs_.assign(2 * P, MPI_REQUEST_NULL);
    {
      auto lock = mpi_lock();
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        MPI_Irecv(&headers_[static_cast<std::size_t>(q)], sizeof(call_info), MPI_BYTE, q,
                  header_tag(call.seq), ctl_, &header_reqs_[static_cast<std::size_t>(q)]);
        MPI_Isend(&my_call_, sizeof(call_info), MPI_BYTE, q, header_tag(call.seq), ctl_,
                  &header_reqs_[P + static_cast<std::size_t>(q)]);
      }
    }
    headers_[static_cast<std::size_t>(rank_)] = call;
    if (!opts_.debug) return;
    poll(header_reqs_.data(), size_, call, [] { return std::string(); });
    check_headers(call);
  }

  void finish_announce(const call_info& call) {
    poll(header_reqs_.data(), 2 * size_, call, [] { return std::string(); });
    check_headers(call);
  }

  void check_headers(const call_info& call) {
    bool same = true;
    for (int q = 0; q < size_; ++q) {
      last_heard_[static_cast<std::size_t>(q)] = headers_[static_cast<std::size_t>(q)];
      same = same && headers_[static_cast<std::size_t>(q)] == call;
    }
    if (same) return;
    std::string msg = cat("meld::mpi_comm: ranks called different collectives at #", call.seq, ":");
    for (int q = 0; q < size_; ++q)
      msg +=
          cat(q ? ";" : "", " rank ", q, " called ", headers_[static_cast<std::size_t>(q)].str());
    mark_failed(msg, comm_error::reason::mismatch);
    throw comm_error(comm_error::reason::mismatch, msg);
  }

  void check_usable(const call_info& call) {
    check_abort_notices(call);
    std::lock_guard lock(fail_mutex_);
    if (!failed_.empty())
      throw comm_error(fail_reason_, cat("meld::mpi_comm rank ", rank_, ": ", call.str(),
                                         " refused: the communicator failed: ", failed_));
  }

  void mark_failed(const std::string& why, comm_error::reason reason) {
    mpi_failed().store(true);
    std::lock_guard lock(fail_mutex_);
    if (failed_.empty()) {
      failed_ = why;
      fail_reason_ = reason;
    }
  }

  resolved_options opts_;
  bool serialize_ = false;
  int rank_ = 0, size_ = 1;
  MPI_Comm data_ = MPI_COMM_NULL, ctl_ = MPI_COMM_NULL;
  call_info my_call_;
  std::vector<call_info> headers_, last_heard_;
  std::vector<MPI_Request> header_reqs_;
  std::vector<std::string> abort_text_;  // kept alive for the notices in flight
  mutable std::mutex fail_mutex_;
  std::string failed_;
  comm_error::reason fail_reason_ = comm_error::reason::aborted;
  scratch_buffer scratch_;
};

}  // namespace meld::detail::distributed
