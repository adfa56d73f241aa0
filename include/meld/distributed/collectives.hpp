// meld::collectives<Comm, Memory>: the public collectives of every communicator, written once.
// A communicator derives from it (CRTP) and implements only the transport, on comm_buffers:
//
//   class my_comm : public meld::collectives<my_comm> {
//     friend class meld::collectives<my_comm>;
//     static constexpr const char* comm_name = "my_comm";   // for error messages
//     template <class T> request allreduce_impl(comm_buffer<T> buf, reduce_op op, bool async);
//     template <class T> request broadcast_impl(comm_buffer<T> buf, int root, bool async);
//     template <class T> request reduce_scatter_impl(comm_buffer<const T> in, comm_buffer<T> out,
//                                                    reduce_op op, bool async);
//     template <class T> request allgather_impl(comm_buffer<const T> in, comm_buffer<T> out,
//                                               bool async);
//     request barrier_impl(bool async);
//     ...  rank(), size()
//   };
//
// The front end converts each argument once (to_buffer in buffer.hpp: the arguments a
// communicator of that memory takes), checks what does not depend on the transport (element
// types and mutability at compile time; the root and the sizes of reduce_scatter and allgather,
// before the collective gets a sequence number), and calls the *_impl with async = false for the
// blocking form, then waits for the request it returns (CPU communicators run a blocking
// collective on the caller's thread and return a completed request), or with async = true for
// the _async form, and returns the request.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "../core/error.hpp"
#include "buffer.hpp"
#include "communicator.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// The collective operations every communicator offers, written once over the communicator's own
/// operations (CRTP: thread_comm, mpi_comm and nccl_comm derive from it). Each takes contiguous
/// buffers (tensors, spans, comm_buffer) of the same element type on every rank and throws
/// comm_error on a timeout, a mismatch (debug mode) or an abort; the _async forms return a request
/// whose wait() finishes the operation and throws those errors.
template <class Comm, comm_memory Memory = comm_memory::host>
class collectives {
 public:
  /// The memory the communicator's collectives move (host, or a device's).
  static constexpr comm_memory memory_kind = Memory;

  /// Every rank ends with op over all ranks' buf.
  template <detail::distributed::buffer_for<Memory> X>
  void allreduce(X&& buf, reduce_op op = reduce_op::sum) {
    allreduce_async_impl(buf, op, false).wait();
  }
  /// allreduce(), started; returns a request to wait() on.
  template <detail::distributed::buffer_for<Memory> X>
  auto allreduce_async(X&& buf, reduce_op op = reduce_op::sum) {
    return allreduce_async_impl(buf, op, true);
  }

  /// Every rank ends with root's buf.
  template <detail::distributed::buffer_for<Memory> X>
  void broadcast(X&& buf, int root) {
    broadcast_async_impl(buf, root, false).wait();
  }
  /// broadcast(), started; returns a request to wait() on.
  template <detail::distributed::buffer_for<Memory> X>
  auto broadcast_async(X&& buf, int root) {
    return broadcast_async_impl(buf, root, true);
  }

  /// in has size() * out.size() elements; rank r gets op over all ranks of in[r m, (r + 1) m) in
  /// out (m = out.size()).
  template <detail::distributed::buffer_for<Memory> In, detail::distributed::buffer_for<Memory> Out>
  void reduce_scatter(In&& in, Out&& out, reduce_op op = reduce_op::sum) {
    reduce_scatter_async_impl(in, out, op, false).wait();
  }
  /// reduce_scatter(), started; returns a request to wait() on.
  template <detail::distributed::buffer_for<Memory> In, detail::distributed::buffer_for<Memory> Out>
  auto reduce_scatter_async(In&& in, Out&& out, reduce_op op = reduce_op::sum) {
    return reduce_scatter_async_impl(in, out, op, true);
  }

  /// out has size() * in.size() elements; out[r m, (r + 1) m) = rank r's in (m = in.size()).
  template <detail::distributed::buffer_for<Memory> In, detail::distributed::buffer_for<Memory> Out>
  void allgather(In&& in, Out&& out) {
    allgather_async_impl(in, out, false).wait();
  }
  /// allgather(), started; returns a request to wait() on.
  template <detail::distributed::buffer_for<Memory> In, detail::distributed::buffer_for<Memory> Out>
  auto allgather_async(In&& in, Out&& out) {
    return allgather_async_impl(in, out, true);
  }

  /// Returns when every rank has entered it.
  void barrier() { self().barrier_impl(false).wait(); }
  /// barrier(), started; returns a request to wait() on.
  auto barrier_async() { return self().barrier_impl(true); }

 private:
  Comm& self() { return static_cast<Comm&>(*this); }

  template <class X>
  auto allreduce_async_impl(X& x, reduce_op op, bool async) {
    return staged<true>(x, [&](auto& b) { return self().allreduce_impl(written(b), op, async); });
  }

  template <class X>
  auto broadcast_async_impl(X& x, int root, bool async) {
    if (root < 0 || root >= self().size())
      throw std::invalid_argument(detail::cat(Comm::comm_name, "::broadcast: root ", root,
                                              " is not a rank of ", self().size()));
    return staged<true>(x, [&](auto& b) { return self().broadcast_impl(written(b), root, async); });
  }

  template <class In, class Out>
  auto reduce_scatter_async_impl(In& x, Out& y, reduce_op op, bool async) {
    return staged<false>(x, [&](auto& xb) {
      return staged<true>(y, [&](auto& yb) {
        const auto [in, out] = in_out(xb, yb);
        if (in.size() != out.size() * static_cast<std::size_t>(self().size()))
          throw shape_error(detail::cat(Comm::comm_name, "::reduce_scatter: the input has ",
                                        in.size(), " elements, expected ", self().size(),
                                        " ranks x ", out.size(), " (the output's size)"));
        return self().reduce_scatter_impl(in, out, op, async);
      });
    });
  }

  template <class In, class Out>
  auto allgather_async_impl(In& x, Out& y, bool async) {
    return staged<false>(x, [&](auto& xb) {
      return staged<true>(y, [&](auto& yb) {
        const auto [in, out] = in_out(xb, yb);
        if (out.size() != in.size() * static_cast<std::size_t>(self().size()))
          throw shape_error(detail::cat(Comm::comm_name, "::allgather: the output has ", out.size(),
                                        " elements, expected ", self().size(), " ranks x ",
                                        in.size(), " (the input's size)"));
        return self().allgather_impl(in, out, async);
      });
    });
  }

  // Calls start(x), or, for an argument host memory cannot reach (a CUDA tensor through
  // thread_comm or mpi_comm) or one wrapped in through_host, start(a host copy of it), whose
  // request copies the result back into it when it completes (if Written).
  template <bool Written, class X, class Start>
  static auto staged(X& x, Start&& start) {
    using A = std::remove_cvref_t<X>;
    if constexpr (Memory == comm_memory::host && detail::distributed::staged_tensor_arg<A>) {
      auto& target = detail::distributed::staged_target(x);
      using Target = std::remove_reference_t<decltype(target)>;
      using T = typename std::remove_cv_t<Target>::value_type;
      static_assert(!Written || (!std::is_const_v<Target> && !std::is_const_v<T>),
                    "collectives: the buffer a collective writes (allreduce's, broadcast's, the "
                    "output of reduce_scatter and allgather) must be mutable");
      tensor<std::remove_const_t<T>> host = meld::to<cpu<>>(target);
      auto request = start(host);
      Target* back = nullptr;
      if constexpr (Written) back = &target;
      return detail::distributed::staged_request<decltype(request), Target, std::remove_const_t<T>>(
          std::move(request), std::move(host), back);
    } else {
      return start(x);
    }
  }

  // A buffer the collective writes: mutable elements of a type collectives move.
  template <class X>
  static auto written(X& x) {
    const auto buf = detail::distributed::to_buffer<Memory>(x);
    using T = typename decltype(buf)::element_type;
    static_assert(detail::distributed::comm_element<T> && !std::is_const_v<T>,
                  "collectives: the buffer a collective writes (allreduce's, broadcast's, the "
                  "output of reduce_scatter and allgather) must be mutable float, double, int32 "
                  "or int64 elements");
    return buf;
  }

  // The input as const elements, the output as mutable ones of the same type.
  template <class In, class Out>
  static auto in_out(In& x, Out& y) {
    const auto in = detail::distributed::to_buffer<Memory>(x);
    const auto out = written(y);
    using T = typename decltype(out)::element_type;
    static_assert(std::is_same_v<std::remove_const_t<typename decltype(in)::element_type>, T>,
                  "reduce_scatter / allgather: the input and the output must have the same "
                  "element type");
    return std::pair{comm_buffer<const T>(in), out};
  }
};

/// @}

}  // namespace meld
