// The customization points a backend specializes (backend/concept.hpp states the whole contract):
//
//   memory<B>           allocate and free the backend's memory; its devices
//   access_tracking<B>  per-storage ordering state of asynchronous work (nothing under sync)
//   executor<B>         evaluation, reductions, products, copies (declared in expr/expression.hpp,
//                       the seam between expressions and backends)
#pragma once

#include <cstddef>
#include <type_traits>

#include "../expr/expression.hpp"
#include "future.hpp"
#include "policy.hpp"

namespace meld {

template <class Backend>
struct memory;

// What a backend tracks per storage to order asynchronous work on it. The default, for synchronous
// backends: nothing, and host access never waits.
template <class Backend>
struct access_tracking {
  struct type {
    void wait_host(bool /*write*/) {}
  };
};

// What a reduction to one value returns under a backend: the value (sync), or a meld::future of
// it that converts to the value on use (async).
template <class Backend, class T>
using scalar_result_t =
    std::conditional_t<std::is_same_v<typename Backend::policy, async>, future<T>, T>;

// The result type of reducing expression E with reducer R.
template <class R, class E>
using reduce_result_t = typename R::template result<detail::compute_t<value_t<E>>>;

namespace detail {
// Host code that reads or writes elements (data(), begin(), element access, item(), spans)
// compiles only for backends whose memory the host can address: a host loop over device memory is
// a compile error here, with the backend in the instantiation's name.
template <class Backend>
constexpr void require_host_access() {
  static_assert(Backend::host_accessible,
                "meld: the host cannot address this tensor's elements: its backend (named in "
                "require_host_access<...> above) keeps them in device memory. Copy the tensor "
                "with meld::to<meld::cpu<>>(t), or compute with expressions.");
}
}  // namespace detail

}  // namespace meld
