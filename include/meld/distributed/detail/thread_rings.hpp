// thread_comm's algorithms: bandwidth-optimal rings that move data directly between the ranks'
// buffers (shared memory: a rank reads its left neighbour's published buffer), pipelined in
// slices. Each function is one rank's part of the collective `call`; a rank waits only for its two
// neighbours' progress counters (thread_endpoint), and reads a neighbour's buffers only after
// checking that it called the same collective (thread_endpoint::matching_entry). See
// thread_comm.hpp for the algorithms' costs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../communicator.hpp"
#include "reduce_kernels.hpp"
#include "thread_endpoint.hpp"

namespace meld::detail::distributed {

// Reduce-scatter then allgather around the ring, slice by slice. The chunks and the order each
// element is summed in are ring_reduce_scatter's over the same elements padded to a multiple of
// k: chunk c is [c m, (c + 1) m) with m = ceil(n / k), its sum starts at rank c + 1 and completes
// at rank c. So an allreduce and a reduce-scatter of the same data give the same bits, which
// data_parallel's sharded optimizer relies on (its shards are bit-identical to the unsharded
// path's gradients whatever the number of ranks).
template <class T>
void ring_allreduce(thread_endpoint& me, T* buf, const call_info& call, reduce_op op) {
  me.arrive(call, buf, buf, nullptr);
  const int k = me.size(), r = me.rank();
  const index_t n = call.count;
  if (k == 1 || n == 0) return;
  const std::uint64_t base = seq_base(call.seq);
  const T* lbuf = static_cast<const T*>(me.matching_entry(me.left(), call).dst);
  const index_t m = (n + k - 1) / k;
  const index_t S = me.slices(m, sizeof(T));
  const index_t steps = 2 * (k - 1);
  for (index_t g = 0; g < steps; ++g) {
    // Reduce-scatter step g adds this rank's chunk r - 2 - g to the left neighbour's partial sum
    // (at g = 0, its own elements); allgather step t copies chunk r - 1 - t, complete, from it.
    const bool scatter = g < k - 1;
    const index_t t = g - (k - 1);
    const int c = scatter ? me.mod(r - 2 - static_cast<long>(g)) : me.mod(r - 1 - t);
    const index_t lo = std::min(n, c * m), len = std::min(n, lo + m) - lo;
    for (index_t j = 0; j < S; ++j) {
      const index_t u = g * S + j;
      if (u >= S) me.await(me.left(), base + static_cast<std::uint64_t>(u - S + 1), call);
      // Before overwriting a slice with its final value, the right neighbour must have read
      // its partial sum (its reduce-scatter step t).
      if (!scatter) me.await(me.right(), base + static_cast<std::uint64_t>(t * S + j + 1), call);
      const index_t a = lo + part_begin(len, S, j), b = lo + part_begin(len, S, j + 1);
      if (scatter)
        reduce_into(buf + a, lbuf + a, b - a, op);
      else
        copy_elements(buf + a, lbuf + a, b - a);
      me.advance(base + static_cast<std::uint64_t>(u + 1));
    }
  }
  // The right neighbour reads this buffer until its last step.
  me.await(me.right(), base + static_cast<std::uint64_t>(steps * S), call);
}

// The reduce-scatter half of the ring, with partial sums in the ranks' scratch memory.
template <class T>
void ring_reduce_scatter(thread_endpoint& me, const T* in, T* out, const call_info& call,
                         reduce_op op) {
  const int k = me.size(), r = me.rank();
  const index_t m = call.count;
  T* scratch =
      k > 2 ? static_cast<T*>(me.scratch(2 * static_cast<std::size_t>(m) * sizeof(T))) : nullptr;
  me.arrive(call, in, out, scratch);
  if (m == 0) return;
  if (k == 1) return copy_elements(out, in, m);
  const std::uint64_t base = seq_base(call.seq);
  const tc_entry& le = me.matching_entry(me.left(), call);
  const T* lin = static_cast<const T*>(le.src);
  const T* lscratch = static_cast<const T*>(le.scratch);
  const index_t S = me.slices(m, sizeof(T));
  // Step s handles chunk r - s - 2: its partial sum passes from rank to rank and ends, complete,
  // at its own rank after k - 1 steps. Partial sums alternate between two scratch halves.
  for (index_t s = 0; s < k - 1; ++s) {
    const int c = me.mod(r - 2 - static_cast<long>(s));
    const bool last = s == k - 2;
    for (index_t j = 0; j < S; ++j) {
      const index_t u = s * S + j;
      const index_t a = part_begin(m, S, j), len = part_begin(m, S, j + 1) - a;
      if (s > 0) me.await(me.left(), base + static_cast<std::uint64_t>(u - S + 1), call);
      if (s >= 2 && !last)
        me.await(me.right(), base + static_cast<std::uint64_t>((s - 1) * S + j + 1), call);
      const T* partial = s == 0 ? lin + c * m + a : lscratch + ((s - 1) % 2) * m + a;
      T* dst = last ? out + a : scratch + (s % 2) * m + a;
      reduce_to(dst, in + c * m + a, partial, len, op);
      me.advance(base + static_cast<std::uint64_t>(u + 1));
    }
  }
  me.await(me.right(), base + static_cast<std::uint64_t>((k - 1) * S), call);
}

// A ring of copies.
template <class T>
void ring_allgather(thread_endpoint& me, const T* in, T* out, const call_info& call) {
  me.arrive(call, in, out, nullptr);
  const int k = me.size(), r = me.rank();
  const index_t m = call.count;
  if (m == 0) return;
  if (k == 1) return copy_elements(out, in, m);
  const std::uint64_t base = seq_base(call.seq);
  const index_t S = me.slices(m, sizeof(T));
  // Step 0 copies this rank's own chunk; step s copies chunk r - s from the left neighbour.
  for (index_t j = 0; j < S; ++j) {
    const index_t a = part_begin(m, S, j), b = part_begin(m, S, j + 1);
    copy_elements(out + r * m + a, in + a, b - a);
    me.advance(base + static_cast<std::uint64_t>(j + 1));
  }
  const T* lout = static_cast<const T*>(me.matching_entry(me.left(), call).dst);
  for (index_t s = 1; s < k; ++s) {
    const int c = me.mod(r - static_cast<long>(s));
    for (index_t j = 0; j < S; ++j) {
      const index_t u = s * S + j;
      me.await(me.left(), base + static_cast<std::uint64_t>(u - S + 1), call);
      const index_t a = c * m + part_begin(m, S, j), b = c * m + part_begin(m, S, j + 1);
      copy_elements(out + a, lout + a, b - a);
      me.advance(base + static_cast<std::uint64_t>(u + 1));
    }
  }
  me.await(me.right(), base + static_cast<std::uint64_t>(k * S), call);
}

// A pipelined chain from the root: each rank copies slices from its left neighbour.
template <class T>
void chain_broadcast(thread_endpoint& me, T* buf, const call_info& call) {
  me.arrive(call, buf, buf, nullptr);
  const int k = me.size();
  const index_t n = call.count;
  if (k == 1 || n == 0) return;
  const std::uint64_t base = seq_base(call.seq);
  const index_t S = me.slices(n, sizeof(T));
  const int d = me.mod(me.rank() - call.root);  // position in the chain from the root
  if (d == 0) {
    me.advance(base + static_cast<std::uint64_t>(S));
  } else {
    const T* lbuf = static_cast<const T*>(me.matching_entry(me.left(), call).dst);
    for (index_t j = 0; j < S; ++j) {
      me.await(me.left(), base + static_cast<std::uint64_t>(j + 1), call);
      const index_t a = part_begin(n, S, j), b = part_begin(n, S, j + 1);
      copy_elements(buf + a, lbuf + a, b - a);
      me.advance(base + static_cast<std::uint64_t>(j + 1));
    }
  }
  if (d < k - 1) me.await(me.right(), base + static_cast<std::uint64_t>(S), call);
}

// Every rank announces its arrival and waits for the others' (checking that they called a
// barrier too).
inline void arrive_all(thread_endpoint& me, const call_info& call) {
  me.arrive(call, nullptr, nullptr, nullptr);
  if (!me.debug())  // (the debug check already waited for everyone and compared)
    for (int q = 0; q < me.size(); ++q) me.matching_entry(q, call);
}

}  // namespace meld::detail::distributed
