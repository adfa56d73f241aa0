// The synchronous CPU executor: expressions evaluated with xsimd on every core, in the calling
// thread's call (the pieces: assign.hpp, reduce.hpp, reduce_axis.hpp, matmul.hpp). The
// asynchronous policy runs the same code on a stream's worker (queued.hpp). Each operation is a
// traced range (core/trace.hpp) on the thread that runs it.
#pragma once

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "../../core/trace.hpp"
#include "../../tensor/tensor.hpp"
#include "../backend.hpp"
#include "../concept.hpp"
#include "assign.hpp"
#include "cpu.hpp"
#include "generate.hpp"
#include "matmul.hpp"
#include "memory.hpp"
#include "reduce.hpp"
#include "reduce_axis.hpp"
#include "window.hpp"

namespace meld {

template <>
struct executor<cpu<sync>> {
  // Fills a contiguous tensor or view of any host-memory backend.
  template <class Dst, class T>
  static void fill(const Dst& dst, T value) {
    using V = typename Dst::value_type;
    detail::trace_scope traced("fill", "cpu", {"elements", dst.size()});
    detail::cpu_eval::fill(const_cast<V*>(dst.raw_data()), dst.size(), static_cast<V>(value));
  }
  // dst: a tensor or a tensor_view.
  template <class Dst, class E>
  static void assign(const Dst& dst, const E& e) {
    detail::trace_scope traced("assign", "cpu", {"elements", dst.size()});
    detail::cpu_eval::assign(dst, e);
  }
  // dsts[i] = es[i] for each i, as one after another; one pass where all are contiguous.
  template <class... Dst, class... E>
  static void assign_each(const std::tuple<Dst...>& dsts, const std::tuple<E...>& es) {
    detail::trace_scope traced("assign_each", "cpu", {"elements", std::get<0>(dsts).size()});
    detail::cpu_eval::assign_each(dsts, es);
  }
  template <class R, class E>
  static reduce_result_t<R, E> reduce(const E& e) {
    detail::trace_scope traced("reduce", "cpu", {"elements", e.shape().product()});
    return detail::cpu_eval::reduce<R>(e);
  }
  template <class R, class Dst, class E>
  static void reduce_axis(const Dst& dst, const E& e, int axis) {
    detail::trace_scope traced("reduce_axis", "cpu", {"elements", e.shape().product()});
    detail::cpu_eval::reduce_axis<R>(dst, e, axis);
  }
  // c = alpha a b + beta c (shapes checked by meld::gemm); an operand that overlaps c is copied.
  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c) {
    detail::trace_scope traced("gemm", "cpu", {"elements", c.size()});
    detail::cpu_eval::gemm_into(alpha, a, b, beta, c);
  }
  template <class Dst, class T>
  static void copy_from_host(const Dst& dst, const T* src) {
    detail::trace_scope traced("copy from host", "cpu", {"elements", dst.size()});
    std::memcpy(const_cast<T*>(dst.raw_data()), src,
                static_cast<std::size_t>(dst.size()) * sizeof(T));
  }
  template <class T, class Src>
  static void copy_to_host(T* dst, const Src& src) {
    detail::trace_scope traced("copy to host", "cpu", {"elements", src.size()});
    std::memcpy(dst, src.raw_data(), static_cast<std::size_t>(src.size()) * sizeof(T));
  }
  template <class Dst, class Src>
  static void copy(const Dst& dst, const Src& src) {
    copy_from_host(dst, src.raw_data());
  }
  // dst[i] = g(i) for every flat index i of a contiguous dst: elements computed from their index
  // (counter-based random draws, arithmetic sequences). Each element depends on its index alone,
  // so the threads' split does not change the result.
  template <class Dst, class G>
  static void generate(const Dst& dst, const G& g) {
    using V = typename Dst::value_type;
    if (!dst.is_contiguous()) throw std::logic_error("meld: generate needs a contiguous tensor");
    detail::cpu_eval::generate(const_cast<V*>(dst.raw_data()), dst.size(), g);
  }
  // Runs fn(args...) now, with host views of the tensors and views among args: how operations
  // that are not expressions (nn's window gathers) run on backends whose kernels are CPU code.
  template <class F, class... Args>
  static void host_kernel(F&& fn, const Args&... args) {
    fn(args...);
  }
};

static_assert(backend<cpu<sync>>);

}  // namespace meld
