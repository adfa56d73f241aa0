// mpi_comm's allreduce: a pipelined ring (reduce-scatter then allgather) over non-blocking
// point-to-point messages on the endpoint's data communicator, with the sums done by meld's SIMD
// evaluation. Every chunk is reduced once, in a fixed order, then copied, so the result has the
// same bits on every rank and in every run. Every request is polled under the endpoint's timeout.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "../communicator.hpp"
#include "mpi_endpoint.hpp"
#include "reduce_kernels.hpp"

namespace meld::detail::distributed {

// Polls the ring's requests until all are complete. on_receive(j) runs when receive slot j
// completes and returns whether it posted another receive there.
template <class Describe, class OnReceive>
void progress_ring(mpi_endpoint& ep, std::vector<MPI_Request>& reqs, index_t S,
                   const call_info& call, Describe describe, OnReceive on_receive) {
  std::vector<char> recv_open(static_cast<std::size_t>(S), 1);
  index_t open = S;
  backoff wait(ep.options().timeout);
  std::vector<int> done(static_cast<std::size_t>(S));
  while (open > 0) {
    int count = 0, rc;
    {
      auto lock = ep.mpi_lock();
      rc = MPI_Testsome(static_cast<int>(S), reqs.data(), &count, done.data(), MPI_STATUSES_IGNORE);
    }
    ep.check(rc, "MPI_Testsome", call);
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
      ep.check_abort_notices(call);
      if (wait.expired()) ep.timed_out(call, wait.waited(), describe());
      wait.pause();
    }
  }
}

// Chunk c of k is reduced around the ring in slices; the reduce-scatter receives each slice
// into a scratch buffer (two halves, alternating by step) and reduces it into place, then
// forwards it; the allgather receives final slices straight into place.
template <class T>
void ring_allreduce(mpi_endpoint& ep, T* buf, const call_info& call, reduce_op op) {
  const int k = ep.size(), r = ep.rank(), left = (r + k - 1) % k, right = (r + 1) % k;
  const index_t n = call.count;
  auto mod = [k](long i) { return static_cast<int>(((i % k) + k) % k); };
  auto lo = [&](int c) { return part_begin(n, k, c); };
  const index_t max_chunk = (n + k - 1) / k;
  const index_t S =
      std::clamp<index_t>(static_cast<index_t>((static_cast<std::size_t>(max_chunk) * sizeof(T) +
                                                ep.options().slice_bytes - 1) /
                                               ep.options().slice_bytes),
                          1, 16);
  auto slice = [&](int c, index_t j, index_t& a, index_t& len) {
    const index_t l = lo(c + 1) - lo(c);
    a = part_begin(l, S, j);
    len = part_begin(l, S, j + 1) - a;
  };
  T* tmp = static_cast<T*>(ep.scratch(2 * static_cast<std::size_t>(max_chunk) * sizeof(T)));
  const MPI_Datatype type = mpi_type<T>();
  const MPI_Comm data = ep.data();
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
    return cat("waiting in the ring for rank ", left, " (receive) and rank ", right,
               " (send), at step ", *std::min_element(step_of.begin(), step_of.end()), " of ",
               k - 1, " of the ", phase);
  };
  auto post = [&](auto&& f) {
    auto lock = ep.mpi_lock();
    f();
  };

  // A failure (a timeout, an abort notice, an MPI error) leaves receives and sends posted on
  // `buf` and `tmp`: they are settled before the exception reaches the caller, who may free
  // `buf` (mpi_endpoint::settle).
  struct settle_on_throw {
    mpi_endpoint* self;
    std::vector<MPI_Request>& reqs;
    ~settle_on_throw() {
      if (std::uncaught_exceptions() == 0) return;
      self->settle(reqs.data(), static_cast<int>(reqs.size()));
    }
  } guard{&ep, reqs};

  // Reduce-scatter: step s receives chunk r - 1 - s (partial) from the left, reduces it into
  // place, and forwards it at step s + 1.
  post([&] {
    for (index_t j = 0; j < S; ++j) {
      index_t a, len;
      slice(mod(r - 1), j, a, len);
      MPI_Irecv(tmp + a, static_cast<int>(len), type, left, tag(j), data,
                &reqs[static_cast<std::size_t>(j)]);
      slice(r, j, a, len);
      MPI_Isend(buf + lo(r) + a, static_cast<int>(len), type, right, tag(j), data, send_slot(0, j));
    }
  });
  progress_ring(ep, reqs, S, call, describe, [&](index_t j) {
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
      MPI_Isend(buf + lo(c) + a, static_cast<int>(len), type, right, tag((s + 1) * S + j), data,
                send_slot(s + 1, j));
      MPI_Irecv(tmp + ((s + 1) % 2) * max_chunk + an, static_cast<int>(lenn), type, left,
                tag((s + 1) * S + j), data, &reqs[static_cast<std::size_t>(j)]);
    });
    return true;
  });
  // Every send must be complete before the allgather receives into the chunks they read.
  ep.poll(reqs.data() + S, static_cast<int>((k - 1) * S), call, describe);

  // Allgather: chunk r + 1 is complete here; step t receives chunk r - t and forwards it.
  phase = "allgather";
  std::fill(step_of.begin(), step_of.end(), 0);
  const index_t base = (k - 1) * S;
  post([&] {
    for (index_t j = 0; j < S; ++j) {
      index_t a, len;
      slice(r, j, a, len);
      MPI_Irecv(buf + lo(r) + a, static_cast<int>(len), type, left, tag(base + j), data,
                &reqs[static_cast<std::size_t>(j)]);
      slice(mod(r + 1), j, a, len);
      MPI_Isend(buf + lo(mod(r + 1)) + a, static_cast<int>(len), type, right, tag(base + j), data,
                send_slot(0, j));
    }
  });
  progress_ring(ep, reqs, S, call, describe, [&](index_t j) {
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
                data, send_slot(t + 1, j));
      MPI_Irecv(buf + lo(cn) + an, static_cast<int>(lenn), type, left, tag(base + (t + 1) * S + j),
                data, &reqs[static_cast<std::size_t>(j)]);
    });
    return true;
  });
  ep.poll(reqs.data() + S, static_cast<int>((k - 1) * S), call, describe);
}

}  // namespace meld::detail::distributed
