// The window operations (backend/window.hpp) as CUDA kernels: one thread per output element of
// each operation, in a grid-stride loop. Scatters (col2im, the pooling gradients) are written as
// gathers, each thread summing what reaches its input element in a fixed order: no atomics, and
// the same result on every run.
//
// A part of executor.hpp, which includes it once executor<cuda<P>> is declared: include that.
#pragma once

#include "platform.hpp"

#include <cstdint>
#include <initializer_list>

#include "../../tensor/tensor_view.hpp"
#include "../window.hpp"

namespace meld {

namespace detail::cuda_window {

using cuda_eval::launch;

struct geometry {
  index_t channels, h, w, out_h, out_w, kh, kw, sh, sw, ph, pw;
};

inline geometry make(const planes& p, const window2d& g) {
  return {p.channels, p.h,        p.w,        p.out_h,     p.out_w,    g.kernel.h,
          g.kernel.w, g.stride.h, g.stride.w, g.padding.h, g.padding.w};
}

#if defined(MELD_CUDA_KERNELS)

#define MELD_GRID_LOOP(i, n)                                                \
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += index_t(gridDim.x) * blockDim.x)

// col {channels kh kw, batch oh ow}: element (r, j) is input (n, c, oh sh + kh - ph, ow sw + kw -
// pw), converted to C.
template <class T, class C>
__global__ void im2col_kernel(const T* __restrict__ x, index_t batch, geometry g,
                              C* __restrict__ col) {
  const index_t l = g.out_h * g.out_w, cols = batch * l, kk = g.kh * g.kw;
  MELD_GRID_LOOP(i, g.channels * kk * cols) {
    const index_t r = i / cols, j = i % cols;
    const index_t c = r / kk, kh = (r % kk) / g.kw, kw = r % g.kw;
    const index_t n = j / l, o = j % l, oh = o / g.out_w, ow = o % g.out_w;
    const index_t ih = oh * g.sh + kh - g.ph, iw = ow * g.sw + kw - g.pw;
    col[i] = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
                 ? C(x[((n * g.channels + c) * g.h + ih) * g.w + iw])
                 : C(0);
  }
}

// The outputs (oh, ow) and kernel offsets (kh, kw) whose window reads input (ih, iw): calls
// f(kh, kw, oh, ow) for each, kh then kw ascending.
template <class F>
__device__ inline void windows_reading(const geometry& g, index_t ih, index_t iw, F&& f) {
  for (index_t kh = 0; kh < g.kh; ++kh) {
    const index_t th = ih + g.ph - kh;
    if (th < 0 || th % g.sh != 0) continue;
    const index_t oh = th / g.sh;
    if (oh >= g.out_h) continue;
    for (index_t kw = 0; kw < g.kw; ++kw) {
      const index_t tw = iw + g.pw - kw;
      if (tw < 0 || tw % g.sw != 0) continue;
      const index_t ow = tw / g.sw;
      if (ow >= g.out_w) continue;
      f(kh, kw, oh, ow);
    }
  }
}

// dx (n, c, ih, iw) += the column entries that im2col took from it.
template <class T>
__global__ void col2im_kernel(const T* __restrict__ col, index_t batch, geometry g,
                              T* __restrict__ dx) {
  const index_t l = g.out_h * g.out_w, cols = batch * l, hw = g.h * g.w;
  MELD_GRID_LOOP(i, batch * g.channels * hw) {
    const index_t n = i / (g.channels * hw), c = (i / hw) % g.channels;
    const index_t ih = (i % hw) / g.w, iw = i % g.w;
    T sum = T(0);
    windows_reading(g, ih, iw, [&](index_t kh, index_t kw, index_t oh, index_t ow) {
      sum += col[((c * g.kh + kh) * g.kw + kw) * cols + n * l + oh * g.out_w + ow];
    });
    dx[i] += sum;
  }
}

// The first maximum of each window (padding never wins; NaN propagates) and its plane position.
template <class T>
__global__ void max_pool_kernel(const T* __restrict__ x, index_t count, geometry g,
                                T* __restrict__ y, std::int32_t* __restrict__ argmax) {
  const index_t l = g.out_h * g.out_w;
  MELD_GRID_LOOP(i, count * l) {
    const index_t plane = i / l, oh = (i % l) / g.out_w, ow = i % g.out_w;
    const T* in = x + plane * g.h * g.w;
    T best = T(0);
    std::int32_t at = -1;
    for (index_t kh = 0; kh < g.kh; ++kh) {
      const index_t ih = oh * g.sh + kh - g.ph;
      if (ih < 0 || ih >= g.h) continue;
      for (index_t kw = 0; kw < g.kw; ++kw) {
        const index_t iw = ow * g.sw + kw - g.pw;
        if (iw < 0 || iw >= g.w) continue;
        const T v = in[ih * g.w + iw];
        if (at < 0 || v > best || (v != v && best == best)) {
          best = v;
          at = static_cast<std::int32_t>(ih * g.w + iw);
        }
      }
    }
    y[i] = at < 0 ? -T(INFINITY) : best;
    argmax[i] = at;
  }
}

// dx gets each output gradient at the position its window's maximum came from.
template <class T>
__global__ void max_unpool_kernel(const T* __restrict__ grad,
                                  const std::int32_t* __restrict__ argmax, index_t count,
                                  geometry g, T* __restrict__ dx) {
  const index_t l = g.out_h * g.out_w, hw = g.h * g.w;
  MELD_GRID_LOOP(i, count * hw) {
    const index_t plane = i / hw, pos = i % hw, ih = pos / g.w, iw = pos % g.w;
    T sum = T(0);
    windows_reading(g, ih, iw, [&](index_t, index_t, index_t oh, index_t ow) {
      const index_t o = plane * l + oh * g.out_w + ow;
      if (argmax[o] == pos) sum += grad[o];
    });
    dx[i] += sum;
  }
}

// Window means, zero padding included (divided by the full kernel size).
template <class T>
__global__ void avg_pool_kernel(const T* __restrict__ x, index_t count, geometry g,
                                T* __restrict__ y) {
  const index_t l = g.out_h * g.out_w;
  const T scale = T(1) / static_cast<T>(g.kh * g.kw);
  MELD_GRID_LOOP(i, count * l) {
    const index_t plane = i / l, oh = (i % l) / g.out_w, ow = i % g.out_w;
    const T* in = x + plane * g.h * g.w;
    T sum = T(0);
    for (index_t kh = 0; kh < g.kh; ++kh) {
      const index_t ih = oh * g.sh + kh - g.ph;
      if (ih < 0 || ih >= g.h) continue;
      for (index_t kw = 0; kw < g.kw; ++kw) {
        const index_t iw = ow * g.sw + kw - g.pw;
        if (iw >= 0 && iw < g.w) sum += in[ih * g.w + iw];
      }
    }
    y[i] = sum * scale;
  }
}

// Each input position's gradient: the sum of the gradients of the windows reading it, scaled,
// added into dx or (Add false) written, so that dx needs no zeroing first.
template <class T, bool Add>
__global__ void avg_unpool_kernel(const T* __restrict__ grad, index_t count, geometry g,
                                  T* __restrict__ dx) {
  const index_t l = g.out_h * g.out_w, hw = g.h * g.w;
  const T scale = T(1) / static_cast<T>(g.kh * g.kw);
  MELD_GRID_LOOP(i, count * hw) {
    const index_t plane = i / hw, ih = (i % hw) / g.w, iw = i % g.w;
    T sum = T(0);
    windows_reading(g, ih, iw, [&](index_t, index_t, index_t oh, index_t ow) {
      sum += grad[plane * l + oh * g.out_w + ow];
    });
    if constexpr (Add)
      dx[i] += sum * scale;
    else
      dx[i] = T(0) + sum * scale;
  }
}

#undef MELD_GRID_LOOP

#endif

// Runs enqueue(stream, device) on the stream of the written view, after the work that writes the
// read views (and reads or writes the written one), recording both; waits under cuda<sync>.
template <class Policy, class Out, class F>
void run(const Out& out, std::initializer_list<cuda_access*> reads, F&& enqueue) {
  if (out.size() == 0) return;
  auto& written = out.storage_ptr()->access();
  const int device = written.device();
  cuda_device_guard guard(device);
  cudaStream_t s = written.home()->handle;
  for (cuda_access* a : reads)
    if (a) a->before(s, false);
  written.before(s, true);
  enqueue(s, device);
  for (cuda_access* a : reads)
    if (a) a->after(s, false);
  written.after(s, true);
  executor<cuda<Policy>>::finish(s);
}

template <class V>
cuda_access* access_of(const V& v) {
  return v.storage_ptr() ? &v.storage_ptr()->access() : nullptr;
}

}  // namespace detail::cuda_window

template <class Policy>
struct window_ops<cuda<Policy>> {
  template <class T>
  using in = tensor_view<const T, cuda<Policy>>;
  template <class T>
  using out = tensor_view<T, cuda<Policy>>;

  template <class T, class C>
  static void im2col(in<T> x, index_t batch, detail::planes p, detail::window2d g, out<C> col) {
    using namespace detail::cuda_window;
    detail::check_devices("im2col", x, col);
    run<Policy>(col, {access_of(x)}, [&](cudaStream_t s, int device) {
      launch("meld::cuda im2col kernel", im2col_kernel<T, C>, col.size(), device, s, x.raw_data(),
             batch, make(p, g), col.raw_data());
    });
  }
  template <class T>
  static void col2im_add(in<T> col, index_t batch, detail::planes p, detail::window2d g,
                         out<T> dx) {
    using namespace detail::cuda_window;
    detail::check_devices("col2im", col, dx);
    run<Policy>(dx, {access_of(col)}, [&](cudaStream_t s, int device) {
      launch("meld::cuda col2im kernel", col2im_kernel<T>, dx.size(), device, s, col.raw_data(),
             batch, make(p, g), dx.raw_data());
    });
  }
  template <class T>
  static void max_pool(in<T> x, index_t count, detail::planes p, detail::window2d g, out<T> y,
                       out<std::int32_t> argmax) {
    using namespace detail::cuda_window;
    detail::check_devices("max_pool2d", x, y, argmax);
    run<Policy>(y, {access_of(x)}, [&](cudaStream_t s, int device) {
      argmax.storage_ptr()->access().before(s, true);
      launch("meld::cuda max_pool kernel", max_pool_kernel<T>, y.size(), device, s, x.raw_data(),
             count, make(p, g), y.raw_data(), argmax.raw_data());
      argmax.storage_ptr()->access().after(s, true);
    });
  }
  template <class T>
  static void max_unpool_add(in<T> grad, in<std::int32_t> argmax, index_t count, detail::planes p,
                             detail::window2d g, out<T> dx) {
    using namespace detail::cuda_window;
    detail::check_devices("max_pool2d backward", grad, argmax, dx);
    run<Policy>(dx, {access_of(grad), access_of(argmax)}, [&](cudaStream_t s, int device) {
      launch("meld::cuda max_pool backward kernel", max_unpool_kernel<T>, dx.size(), device, s,
             grad.raw_data(), argmax.raw_data(), count, make(p, g), dx.raw_data());
    });
  }
  template <class T>
  static void avg_pool(in<T> x, index_t count, detail::planes p, detail::window2d g, out<T> y) {
    using namespace detail::cuda_window;
    detail::check_devices("avg_pool2d", x, y);
    run<Policy>(y, {access_of(x)}, [&](cudaStream_t s, int device) {
      launch("meld::cuda avg_pool kernel", avg_pool_kernel<T>, y.size(), device, s, x.raw_data(),
             count, make(p, g), y.raw_data());
    });
  }
  template <class T>
  static void avg_unpool_add(in<T> grad, index_t count, detail::planes p, detail::window2d g,
                             out<T> dx) {
    unpool<true>(grad, count, p, g, dx);
  }
  template <class T>
  static void avg_unpool(in<T> grad, index_t count, detail::planes p, detail::window2d g,
                         out<T> dx) {
    unpool<false>(grad, count, p, g, dx);
  }

 private:
  template <bool Add, class T>
  static void unpool(in<T> grad, index_t count, detail::planes p, detail::window2d g, out<T> dx) {
    using namespace detail::cuda_window;
    detail::check_devices("avg_pool2d backward", grad, dx);
    run<Policy>(dx, {access_of(grad)}, [&](cudaStream_t s, int device) {
      launch("meld::cuda avg_pool backward kernel", avg_unpool_kernel<T, Add>, dx.size(), device, s,
             grad.raw_data(), count, make(p, g), dx.raw_data());
    });
  }
};

}  // namespace meld
