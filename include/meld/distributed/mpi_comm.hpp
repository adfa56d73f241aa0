// mpi_comm: a communicator over MPI processes (one rank per process), for one machine or many,
// launched with mpirun. Needs MPI (Open MPI: libopenmpi-dev, openmpi-bin) and MELD_ENABLE_MPI.
//
//   int main(int argc, char** argv) {
//     meld::mpi_session mpi(argc, argv);            // MPI_Init_thread(MPI_THREAD_MULTIPLE)
//     meld::mpi_comm comm;                          // MPI_COMM_WORLD
//     comm.allreduce(grads);
//   }
//
// How it works:
//   * The communicator duplicates the one it is given twice (with MPI_Comm_idup, under the
//     timeout): one for data, one for control messages, so that neither mixes with the user's.
//   * allreduce is a pipelined ring (reduce-scatter then allgather) over non-blocking
//     point-to-point messages, with the sums done by meld's SIMD evaluation: the bandwidth-optimal
//     algorithm, and one whose result has the same bits on every rank and in every run (every
//     chunk is reduced once, in a fixed order, then copied). `native_allreduce` uses
//     MPI_Iallreduce instead. The other collectives are MPI's non-blocking ones (MPI_Ibcast,
//     MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibarrier).
//   * Nothing blocks inside MPI: every request is polled (MPI_Test*) against a deadline, with a
//     back-off from spinning to short sleeps. A wait that sees no progress for `timeout` (default
//     10 minutes, comm_options or MELD_COMM_TIMEOUT) throws comm_error.
//   * Each collective starts by sending its description (sequence, operation, element type,
//     count, root) to every peer on the control communicator. On a timeout, the peers whose
//     description for this collective never came are the ones named as missing, with the last
//     collective each was seen in. In debug mode the descriptions are compared before any data
//     moves, and a mismatch throws comm_error naming every rank's call. (This costs 2 (P - 1)
//     small messages per collective: a few microseconds for a handful of ranks.)
//   * A rank that fails (a timeout, or abort()) sends an abort notice to every peer: collectives
//     waiting there throw comm_error at once, naming the rank and the reason. A communicator that
//     failed refuses new collectives, and its destructor does not free MPI resources that could
//     wait for dead peers. The process should then end: std::exit or MPI_Abort.
//   * Asynchronous collectives run, in issue order, on a progress thread that polls MPI; so
//     MPI must be initialized with MPI_THREAD_SERIALIZED at least (mpi_session asks for
//     MPI_THREAD_MULTIPLE). Below MULTIPLE, meld serializes its own MPI calls.
//
// A process killed by a signal: Open MPI's mpirun (4.1) then ends the whole job at once, the
// survivors included, and reports which rank died. With `mpirun --enable-recovery` the survivors
// keep running, and their pending collective throws comm_error naming the dead rank within
// about the timeout (tests/distributed/mpi_sigkill.cmake checks both behaviours).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "buffer.hpp"
#include "communicator.hpp"
#include "detail/progress.hpp"
#include "detail/reduce_kernels.hpp"

namespace meld {

struct mpi_comm_options : comm_options {
  // allreduce with MPI_Iallreduce instead of meld's ring.
  bool native_allreduce = false;
};

// Initializes MPI for meld (MPI_Init_thread asking for MPI_THREAD_MULTIPLE) and finalizes it.
// (Open MPI 4.1's MPI_Finalize returns even when a peer has died, with --enable-recovery.)
class mpi_session {
 public:
  mpi_session(int& argc, char**& argv, int required = MPI_THREAD_MULTIPLE) {
    init(&argc, &argv, required);
  }
  mpi_session() { init(nullptr, nullptr, MPI_THREAD_MULTIPLE); }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;
  ~mpi_session() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner_ && !finalized) MPI_Finalize();
  }

  int provided() const { return provided_; }

 private:
  void init(int* argc, char*** argv, int required) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&provided_);
      return;
    }
    owner_ = true;
    if (MPI_Init_thread(argc, argv, required, &provided_) != MPI_SUCCESS)
      throw comm_error(comm_error::reason::backend, "mpi_session: MPI_Init_thread failed");
  }
  int provided_ = 0;
  bool owner_ = false;
};

namespace detail::dist {

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

}  // namespace detail::dist

class mpi_comm {
 public:
  using request = comm_request;

  explicit mpi_comm(MPI_Comm comm = MPI_COMM_WORLD, const mpi_comm_options& options = {})
      : opts_(detail::dist::resolve(options, std::chrono::minutes(10), std::size_t(1) << 20)),
        native_allreduce_(options.native_allreduce) {
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
        throw comm_error(comm_error::reason::timeout,
                         detail::cat("meld::mpi_comm rank ", rank_,
                                     ": constructing the communicator timed out after ",
                                     detail::dist::seconds_str(wait.waited()),
                                     ": not every rank constructed one (MPI_Comm_idup)"));
      }
      wait.pause();
    }
  }

  mpi_comm(const mpi_comm&) = delete;
  mpi_comm& operator=(const mpi_comm&) = delete;

  ~mpi_comm() {
    queue_.stop();
    if (failed_.empty()) {
      auto lock = mpi_lock();
      MPI_Comm_free(&data_);
      MPI_Comm_free(&ctl_);
    }
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::uint64_t next_sequence() const { return seq_ + 1; }
  std::chrono::milliseconds timeout() const { return opts_.timeout; }
  bool debug() const { return opts_.debug; }
  // The duplicated communicator meld's data moves on.
  MPI_Comm native() const { return data_; }

  // ---- collectives (see communicator.hpp)
  // --------------------------------------------------------

  template <detail::dist::buffer X>
  void allreduce(X&& buf, reduce_op op = reduce_op::sum) {
    allreduce_impl(detail::dist::as_span(buf), op, false);
  }
  template <detail::dist::buffer X>
  comm_request allreduce_async(X&& buf, reduce_op op = reduce_op::sum) {
    return allreduce_impl(detail::dist::as_span(buf), op, true);
  }
  template <detail::dist::buffer X>
  void broadcast(X&& buf, int root) {
    broadcast_impl(detail::dist::as_span(buf), root, false);
  }
  template <detail::dist::buffer X>
  comm_request broadcast_async(X&& buf, int root) {
    return broadcast_impl(detail::dist::as_span(buf), root, true);
  }
  template <detail::dist::buffer In, detail::dist::buffer Out>
  void reduce_scatter(In&& in, Out&& out, reduce_op op = reduce_op::sum) {
    reduce_scatter_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out), op,
                        false);
  }
  template <detail::dist::buffer In, detail::dist::buffer Out>
  comm_request reduce_scatter_async(In&& in, Out&& out, reduce_op op = reduce_op::sum) {
    return reduce_scatter_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out),
                               op, true);
  }
  template <detail::dist::buffer In, detail::dist::buffer Out>
  void allgather(In&& in, Out&& out) {
    allgather_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out), false);
  }
  template <detail::dist::buffer In, detail::dist::buffer Out>
  comm_request allgather_async(In&& in, Out&& out) {
    return allgather_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out), true);
  }
  void barrier() { barrier_impl(false); }
  comm_request barrier_async() { return barrier_impl(true); }

  void drain() { queue_.drain(); }

  // Fails this communicator and tells every peer (their pending collectives throw comm_error
  // naming this rank and the reason).
  void abort(const std::string& reason) {
    fail(comm_error::reason::aborted, detail::cat("rank ", rank_, " aborted: ", reason));
  }

  // Whether this communicator has failed, and why.
  bool failed() const {
    std::lock_guard lock(fail_mutex_);
    return !failed_.empty();
  }

 private:
  using clock = detail::dist::clock;
  using call_info = detail::dist::call_info;

  template <class T>
  static std::span<const T> const_span(std::span<T> s) {
    return std::span<const T>(s.data(), s.size());
  }

  std::unique_lock<std::recursive_mutex> mpi_lock() const {
    return serialize_ ? std::unique_lock<std::recursive_mutex>(detail::dist::mpi_mutex())
                      : std::unique_lock<std::recursive_mutex>();
  }

  // Turns an MPI error code into comm_error (and fails the communicator).
  void check(int rc, const char* what, const call_info& call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    const std::string msg =
        detail::cat("meld::mpi_comm rank ", rank_, ": ", call.str(), ": ", what, " failed: ", text);
    fail(comm_error::reason::backend, msg);
    throw comm_error(comm_error::reason::backend, msg);
  }

  // After a failure: cancels the receives that are still posted (so that a late message cannot
  // write into freed memory) and waits briefly for the cancellations; sends are left to finish.
  void cancel_receives(MPI_Request* reqs, int n) noexcept {
    auto lock = mpi_lock();
    for (int i = 0; i < n; ++i)
      if (reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&reqs[i]);
    const auto deadline = clock::now() + std::chrono::seconds(1);
    for (int flag = 0; !flag && clock::now() < deadline;)
      MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
  }

  static int checked_count(std::size_t n, const char* what) {
    if (n > static_cast<std::size_t>(INT_MAX))
      throw std::length_error(detail::cat("mpi_comm::", what, ": ", n,
                                          " elements exceed MPI's int count; split the buffer"));
    return static_cast<int>(n);
  }

  template <class F>
  comm_request issue(const call_info& call, bool async, F body) {
    auto job = [this, call, body]() mutable {
      check_usable(call);
      try {
        announce(call);
        body(call);
        finish_announce(call);
      } catch (...) {
        // Receives still posted would write into memory that is about to be freed.
        cancel_receives(header_reqs_.data(),
                        std::min<int>(size_, static_cast<int>(header_reqs_.size())));
        throw;
      }
    };
    if (async) return comm_request(queue_.submit(std::move(job)));
    queue_.run(job);
    return {};
  }

  template <class T>
  comm_request allreduce_impl(std::span<T> buf, reduce_op op, bool async) {
    static_assert(detail::dist::comm_element<T> && !std::is_const_v<T>,
                  "mpi_comm::allreduce: the buffer must be mutable float, double, int32 or int64");
    checked_count(buf.size(), "allreduce");
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::allreduce,
                                                 static_cast<std::int64_t>(buf.size()), op);
    return issue(call, async, [this, buf, op](const call_info& c) {
      if (native_allreduce_ || size_ == 1) {
        MPI_Request r;
        int rc;
        {
          auto lock = mpi_lock();
          rc = MPI_Iallreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()),
                              detail::dist::mpi_type<T>(), detail::dist::mpi_op(op), data_, &r);
        }
        check(rc, "MPI_Iallreduce", c);
        poll(&r, 1, c, [] { return std::string("MPI_Iallreduce did not complete"); });
      } else {
        ring_allreduce(buf.data(), c, op);
      }
    });
  }

  template <class T>
  comm_request broadcast_impl(std::span<T> buf, int root, bool async) {
    static_assert(detail::dist::comm_element<T> && !std::is_const_v<T>,
                  "mpi_comm::broadcast: the buffer must be mutable");
    if (root < 0 || root >= size_)
      throw std::invalid_argument(
          detail::cat("mpi_comm::broadcast: root ", root, " is not a rank of ", size_));
    const int n = checked_count(buf.size(), "broadcast");
    const auto call =
        detail::dist::make_call<T>(++seq_, collective_kind::broadcast, n, reduce_op::sum, root);
    return issue(call, async, [this, buf, n, root](const call_info& c) {
      MPI_Request r;
      int rc;
      {
        auto lock = mpi_lock();
        rc = MPI_Ibcast(buf.data(), n, detail::dist::mpi_type<T>(), root, data_, &r);
      }
      check(rc, "MPI_Ibcast", c);
      poll(&r, 1, c, [] { return std::string("MPI_Ibcast did not complete"); });
    });
  }

  template <class T>
  comm_request reduce_scatter_impl(std::span<const T> in, std::span<T> out, reduce_op op,
                                   bool async) {
    static_assert(detail::dist::comm_element<T>, "mpi_comm::reduce_scatter: element type");
    if (in.size() != out.size() * static_cast<std::size_t>(size_))
      throw shape_error(detail::cat("mpi_comm::reduce_scatter: the input has ", in.size(),
                                    " elements, expected ", size_, " ranks x ", out.size(),
                                    " (the output's size)"));
    checked_count(in.size(), "reduce_scatter");
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::reduce_scatter,
                                                 static_cast<std::int64_t>(out.size()), op);
    return issue(call, async, [this, in, out, op](const call_info& c) {
      MPI_Request r;
      int rc;
      {
        auto lock = mpi_lock();
        rc = MPI_Ireduce_scatter_block(in.data(), out.data(), static_cast<int>(out.size()),
                                       detail::dist::mpi_type<T>(), detail::dist::mpi_op(op), data_,
                                       &r);
      }
      check(rc, "MPI_Ireduce_scatter_block", c);
      poll(&r, 1, c, [] { return std::string("MPI_Ireduce_scatter_block did not complete"); });
    });
  }

  template <class T>
  comm_request allgather_impl(std::span<const T> in, std::span<T> out, bool async) {
    static_assert(detail::dist::comm_element<T>, "mpi_comm::allgather: element type");
    if (out.size() != in.size() * static_cast<std::size_t>(size_))
      throw shape_error(detail::cat("mpi_comm::allgather: the output has ", out.size(),
                                    " elements, expected ", size_, " ranks x ", in.size(),
                                    " (the input's size)"));
    checked_count(out.size(), "allgather");
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::allgather,
                                                 static_cast<std::int64_t>(in.size()));
    return issue(call, async, [this, in, out](const call_info& c) {
      MPI_Request r;
      int rc;
      {
        auto lock = mpi_lock();
        rc = MPI_Iallgather(in.data(), static_cast<int>(in.size()), detail::dist::mpi_type<T>(),
                            out.data(), static_cast<int>(in.size()), detail::dist::mpi_type<T>(),
                            data_, &r);
      }
      check(rc, "MPI_Iallgather", c);
      poll(&r, 1, c, [] { return std::string("MPI_Iallgather did not complete"); });
    });
  }

  comm_request barrier_impl(bool async) {
    const auto call = detail::dist::make_call<std::uint8_t>(++seq_, collective_kind::barrier, 0);
    return issue(call, async, [this](const call_info& c) {
      MPI_Request r;
      int rc;
      {
        auto lock = mpi_lock();
        rc = MPI_Ibarrier(data_, &r);
      }
      check(rc, "MPI_Ibarrier", c);
      poll(&r, 1, c, [] { return std::string("MPI_Ibarrier did not complete"); });
    });
  }

  // ---- the ring allreduce -----------------------------------------------------------------------

  // Chunk c of k is reduced around the ring in slices; the reduce-scatter receives each slice
  // into a scratch buffer (two halves, alternating by step) and reduces it into place, then
  // forwards it; the allgather receives final slices straight into place.
  template <class T>
  void ring_allreduce(T* buf, const call_info& call, reduce_op op) {
    using namespace detail::dist;
    const int k = size_, r = rank_, left = (r + k - 1) % k, right = (r + 1) % k;
    const index_t n = call.count;
    auto mod = [k](long i) { return static_cast<int>(((i % k) + k) % k); };
    auto lo = [&](int c) { return part_begin(n, k, c); };
    const index_t max_chunk = (n + k - 1) / k;
    const index_t S =
        std::clamp<index_t>(static_cast<index_t>((static_cast<std::size_t>(max_chunk) * sizeof(T) +
                                                  opts_.slice_bytes - 1) /
                                                 opts_.slice_bytes),
                            1, 16);
    auto slice = [&](int c, index_t j, index_t& a, index_t& len) {
      const index_t l = lo(c + 1) - lo(c);
      a = part_begin(l, S, j);
      len = part_begin(l, S, j + 1) - a;
    };
    T* tmp = static_cast<T*>(scratch_.get(2 * static_cast<std::size_t>(max_chunk) * sizeof(T)));
    const MPI_Datatype type = mpi_type<T>();
    auto tag = [&](index_t u) { return static_cast<int>(u % tag_space); };

    // Request slots: [0, S) the receive of each slice, then one send slot per (step, slice):
    // sends of successive steps may be in flight together (they read regions that stay put).
    std::vector<MPI_Request> reqs(static_cast<std::size_t>(S + (k - 1) * S), MPI_REQUEST_NULL);
    auto send_slot = [&](index_t step, index_t j) {
      return &reqs[static_cast<std::size_t>(S + step * S + j)];
    };
    std::vector<index_t> step_of(static_cast<std::size_t>(S), 0);
    const char* phase = "reduce-scatter";
    auto describe = [&] {
      return detail::cat("waiting in the ring for rank ", left, " (receive) and rank ", right,
                         " (send), at step ", *std::min_element(step_of.begin(), step_of.end()),
                         " of ", k - 1, " of the ", phase);
    };
    auto post = [&](auto&& f) {
      auto lock = mpi_lock();
      f();
    };

    struct cancel_on_throw {
      mpi_comm* self;
      std::vector<MPI_Request>& reqs;
      index_t receives;
      ~cancel_on_throw() {
        if (std::uncaught_exceptions() == 0) return;
        self->cancel_receives(reqs.data(), static_cast<int>(receives));
        auto lock = self->mpi_lock();
        for (std::size_t i = static_cast<std::size_t>(receives); i < reqs.size(); ++i)
          if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[i]);
      }
    } guard{this, reqs, S};

    // Reduce-scatter: step s receives chunk r - 1 - s (partial) from the left, reduces it into
    // place, and forwards it at step s + 1.
    post([&] {
      for (index_t j = 0; j < S; ++j) {
        index_t a, len;
        slice(mod(r - 1), j, a, len);
        MPI_Irecv(tmp + a, static_cast<int>(len), type, left, tag(j), data_,
                  &reqs[static_cast<std::size_t>(j)]);
        slice(r, j, a, len);
        MPI_Isend(buf + lo(r) + a, static_cast<int>(len), type, right, tag(j), data_,
                  send_slot(0, j));
      }
    });
    progress_ring(reqs, S, call, describe, [&](index_t j) {
      const index_t s = step_of[static_cast<std::size_t>(j)];
      const int c = mod(r - 1 - static_cast<long>(s));
      index_t a, len;
      slice(c, j, a, len);
      reduce_into(buf + lo(c) + a, tmp + (s % 2) * max_chunk + a, len, op);
      if (s + 1 > k - 2) return false;
      step_of[static_cast<std::size_t>(j)] = s + 1;
      const int cn = mod(r - 2 - static_cast<long>(s));
      index_t an, lenn;
      slice(cn, j, an, lenn);
      post([&] {
        MPI_Isend(buf + lo(c) + a, static_cast<int>(len), type, right, tag((s + 1) * S + j), data_,
                  send_slot(s + 1, j));
        MPI_Irecv(tmp + ((s + 1) % 2) * max_chunk + an, static_cast<int>(lenn), type, left,
                  tag((s + 1) * S + j), data_, &reqs[static_cast<std::size_t>(j)]);
      });
      return true;
    });
    // Every send must be complete before the allgather receives into the chunks they read.
    poll(reqs.data() + S, static_cast<int>((k - 1) * S), call, describe);

    // Allgather: chunk r + 1 is complete here; step t receives chunk r - t and forwards it.
    phase = "allgather";
    std::fill(step_of.begin(), step_of.end(), 0);
    const index_t base = (k - 1) * S;
    post([&] {
      for (index_t j = 0; j < S; ++j) {
        index_t a, len;
        slice(r, j, a, len);
        MPI_Irecv(buf + lo(r) + a, static_cast<int>(len), type, left, tag(base + j), data_,
                  &reqs[static_cast<std::size_t>(j)]);
        slice(mod(r + 1), j, a, len);
        MPI_Isend(buf + lo(mod(r + 1)) + a, static_cast<int>(len), type, right, tag(base + j),
                  data_, send_slot(0, j));
      }
    });
    progress_ring(reqs, S, call, describe, [&](index_t j) {
      const index_t t = step_of[static_cast<std::size_t>(j)];
      if (t + 1 > k - 2) return false;
      step_of[static_cast<std::size_t>(j)] = t + 1;
      const int c = mod(r - static_cast<long>(t));
      const int cn = mod(r - 1 - static_cast<long>(t));
      index_t a, len, an, lenn;
      slice(c, j, a, len);
      slice(cn, j, an, lenn);
      post([&] {
        MPI_Isend(buf + lo(c) + a, static_cast<int>(len), type, right, tag(base + (t + 1) * S + j),
                  data_, send_slot(t + 1, j));
        MPI_Irecv(buf + lo(cn) + an, static_cast<int>(lenn), type, left,
                  tag(base + (t + 1) * S + j), data_, &reqs[static_cast<std::size_t>(j)]);
      });
      return true;
    });
    poll(reqs.data() + S, static_cast<int>((k - 1) * S), call, describe);
  }

  // Polls the ring's requests until all are complete. on_receive(j) runs when receive slot j
  // completes and returns whether it posted another receive there.
  template <class Describe, class OnReceive>
  void progress_ring(std::vector<MPI_Request>& reqs, index_t S, const call_info& call,
                     Describe describe, OnReceive on_receive) {
    std::vector<char> recv_open(static_cast<std::size_t>(S), 1);
    index_t open = S;
    backoff wait(opts_.timeout);
    std::vector<int> done(static_cast<std::size_t>(S));
    while (open > 0) {
      int count = 0, rc;
      {
        auto lock = mpi_lock();
        rc = MPI_Testsome(static_cast<int>(S), reqs.data(), &count, done.data(),
                          MPI_STATUSES_IGNORE);
      }
      check(rc, "MPI_Testsome", call);
      if (count == MPI_UNDEFINED) count = 0;
      for (int i = 0; i < count; ++i) {
        const index_t j = done[static_cast<std::size_t>(i)];
        if (!on_receive(j)) {
          recv_open[static_cast<std::size_t>(j)] = 0;
          --open;
        }
      }
      if (count > 0) {
        wait.progressed();
      } else {
        check_abort_notices(call);
        if (wait.expired()) timed_out(call, wait.waited(), describe());
        wait.pause();
      }
    }
  }

  // ---- waiting ----------------------------------------------------------------------------------

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

  // ---- descriptions, aborts, failures
  // -------------------------------------------------------------

  int header_tag(std::uint64_t seq) const {
    return detail::dist::header_tag_base + static_cast<int>(seq % detail::dist::tag_space);
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
    std::string msg =
        detail::cat("meld::mpi_comm: ranks called different collectives at #", call.seq, ":");
    for (int q = 0; q < size_; ++q)
      msg += detail::cat(q ? ";" : "", " rank ", q, " called ",
                         headers_[static_cast<std::size_t>(q)].str());
    mark_failed(msg, comm_error::reason::mismatch);
    throw comm_error(comm_error::reason::mismatch, msg);
  }

  [[noreturn]] void timed_out(const call_info& call, clock::duration waited,
                              const std::string& detail_text) {
    using namespace detail::dist;
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
    std::string msg = detail::cat("meld::mpi_comm rank ", rank_, ": ", call.str(),
                                  " timed out after ", seconds_str(waited), " without progress: ");
    if (!missing.empty()) {
      msg += ranks_str(missing) + " never arrived (last collective heard of:";
      for (std::size_t i = 0; i < missing.size(); ++i)
        msg += detail::cat(i ? "; " : " ", "rank ", missing[i], ": ",
                           last_heard_[static_cast<std::size_t>(missing[i])].str());
      msg += ")";
    } else {
      msg += "every rank arrived";
      if (!detail_text.empty()) msg += ", " + detail_text;
    }
    fail(comm_error::reason::timeout, msg);
    throw comm_error(comm_error::reason::timeout, msg);
  }

  void check_usable(const call_info& call) {
    check_abort_notices(call);
    std::lock_guard lock(fail_mutex_);
    if (!failed_.empty())
      throw comm_error(fail_reason_, detail::cat("meld::mpi_comm rank ", rank_, ": ", call.str(),
                                                 " refused: the communicator failed: ", failed_));
  }

  // Throws comm_error if a peer has sent an abort notice.
  void check_abort_notices(const call_info& call) {
    int flag = 0;
    MPI_Status status;
    {
      auto lock = mpi_lock();
      MPI_Iprobe(MPI_ANY_SOURCE, detail::dist::abort_tag, ctl_, &flag, &status);
      if (!flag) return;
      char text[detail::dist::abort_text] = {};
      MPI_Recv(text, static_cast<int>(sizeof(text) - 1), MPI_CHAR, status.MPI_SOURCE,
               detail::dist::abort_tag, ctl_, MPI_STATUS_IGNORE);
      mark_failed(text, comm_error::reason::aborted);
    }
    std::lock_guard lock(fail_mutex_);
    throw comm_error(fail_reason_, detail::cat("meld::mpi_comm rank ", rank_, ": ", call.str(),
                                               " failed: ", failed_));
  }

  void mark_failed(const std::string& why, comm_error::reason reason) {
    std::lock_guard lock(fail_mutex_);
    if (failed_.empty()) {
      failed_ = why;
      fail_reason_ = reason;
    }
  }

  // Marks the communicator failed and sends an abort notice to every peer (without waiting).
  void fail(comm_error::reason reason, const std::string& why) {
    mark_failed(why, reason);
    std::string text = why.substr(0, detail::dist::abort_text - 1);
    abort_text_.push_back(std::move(text));
    auto lock = mpi_lock();
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      MPI_Request r;
      MPI_Isend(abort_text_.back().c_str(), static_cast<int>(abort_text_.back().size() + 1),
                MPI_CHAR, q, detail::dist::abort_tag, ctl_, &r);
      MPI_Request_free(&r);
    }
  }

  detail::dist::resolved_options opts_;
  bool native_allreduce_;
  bool serialize_ = false;
  int rank_ = 0, size_ = 1;
  MPI_Comm data_ = MPI_COMM_NULL, ctl_ = MPI_COMM_NULL;
  std::uint64_t seq_ = 0;
  call_info my_call_;
  std::vector<call_info> headers_, last_heard_;
  std::vector<MPI_Request> header_reqs_;
  std::vector<std::string> abort_text_;  // kept alive for the notices in flight
  mutable std::mutex fail_mutex_;
  std::string failed_;
  comm_error::reason fail_reason_ = comm_error::reason::aborted;
  detail::dist::scratch_buffer scratch_;
  detail::dist::progress_queue queue_;  // last: its thread stops first
};

}  // namespace meld
