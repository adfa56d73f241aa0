// libFuzzer target: meld's shapes, views and expressions against a naive reference. The input
// drives a small program over one base tensor (rank 1..4, extents 0..5): views of it (slices with
// any start, stop and step, huge ones included; indices; transposes; permutations; reshapes;
// broadcast_to; squeeze; unsqueeze), expressions of two views (broadcasting), reductions, and
// assignments through a view from another that may overlap it. The reference keeps a view as the
// base positions of its elements in row-major order (no strides, no offsets: nothing shared with
// meld's layout code), applies assignments through a copy, and says which requests are invalid.
// A disagreement (values, shapes, or an error where the other has none) aborts, and libFuzzer
// keeps the input as the reproducer (tests/fuzz/README.md).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include <meld/meld.hpp>

namespace {

using meld::index_t;
using wide = __int128;

[[noreturn]] void disagree(const char* what) {
  std::fprintf(stderr, "fuzz_views: meld and the reference disagree: %s\n", what);
  std::abort();
}

// A view in the reference: its shape and the base position of each element, row-major.
struct ref_view {
  std::vector<index_t> shape;
  std::vector<index_t> pos;
  bool writable = true;  // (broadcast views repeat elements: meld makes them read-only)
  bool huge = false;     // a valid broadcast too large to list (only its shape is compared)
};

index_t count_of(const std::vector<index_t>& shape) {
  index_t n = 1;
  for (index_t d : shape) n *= d;
  return n;
}

// Calls f(flat, index) for every row-major index of `shape`.
template <class F>
void for_each(const std::vector<index_t>& shape, F f) {
  const index_t n = count_of(shape);
  std::vector<index_t> idx(shape.size(), 0);
  for (index_t k = 0; k < n; ++k) {
    f(k, idx);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < shape[static_cast<std::size_t>(d)]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
}

index_t flat_of(const std::vector<index_t>& shape, const std::vector<index_t>& idx) {
  index_t f = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// Whether a shape meld can hold: the product of its nonzero extents fits in int64.
bool shape_fits(const std::vector<index_t>& shape) {
  wide n = 1;
  for (index_t d : shape) {
    if (d < 0) return false;
    if (d > 0) n *= d;
    if (n > std::numeric_limits<index_t>::max()) return false;
  }
  return shape.size() <= static_cast<std::size_t>(meld::max_rank);
}

meld::shape_t to_shape(const std::vector<index_t>& v) {
  meld::shape_t s;
  for (index_t d : v) s.push_back(d);
  return s;
}
std::vector<index_t> from_shape(const meld::shape_t& s) {
  return {s.begin(), s.end()};
}

// ---- the reference's view operations: each returns nothing for an invalid request ---------------

struct spec {
  bool is_index = false;
  index_t index = 0;
  meld::range r;
};

// The positions along an axis of extent n that a range selects (meld's rules: Python's, with a
// start or stop outside the axis an error instead of clamped), by walking it.
std::optional<std::vector<index_t>> select(const meld::range& r, index_t n) {
  if (r.step == 0) return std::nullopt;
  auto norm = [&](index_t v) { return v < 0 ? wide(v) + n : wide(v); };
  std::vector<index_t> out;
  if (r.step > 0) {
    const wide s = r.start ? norm(*r.start) : 0, e = r.stop ? norm(*r.stop) : wide(n);
    if (s < 0 || s > n || e < 0 || e > n) return std::nullopt;
    for (wide i = s; i < e; i += r.step) out.push_back(static_cast<index_t>(i));
  } else {
    if (n == 0) {
      if (r.start || r.stop) return std::nullopt;
      return out;
    }
    const wide s = r.start ? norm(*r.start) : wide(n) - 1, e = r.stop ? norm(*r.stop) : -1;
    if (s < 0 || s >= n || e < -1 || e >= n || (r.stop && *r.stop < -n)) return std::nullopt;
    for (wide i = s; i > e; i += r.step) out.push_back(static_cast<index_t>(i));
  }
  return out;
}

std::optional<ref_view> ref_slice(const ref_view& v, const std::vector<spec>& specs) {
  if (specs.size() > v.shape.size()) return std::nullopt;
  std::vector<std::vector<index_t>> picks;  // per axis of v: the indices kept
  std::vector<bool> kept;
  for (std::size_t d = 0; d < v.shape.size(); ++d) {
    const index_t n = v.shape[d];
    if (d >= specs.size()) {
      std::vector<index_t> all(static_cast<std::size_t>(n));
      for (index_t i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
      picks.push_back(all);
      kept.push_back(true);
    } else if (specs[d].is_index) {
      const wide i = specs[d].index < 0 ? wide(specs[d].index) + n : wide(specs[d].index);
      if (i < 0 || i >= n) return std::nullopt;
      picks.push_back({static_cast<index_t>(i)});
      kept.push_back(false);
    } else {
      auto s = select(specs[d].r, n);
      if (!s) return std::nullopt;
      picks.push_back(*s);
      kept.push_back(true);
    }
  }
  ref_view out;
  out.writable = v.writable;
  std::vector<index_t> full;  // the shape with dropped axes as extent 1
  for (std::size_t d = 0; d < picks.size(); ++d) {
    full.push_back(static_cast<index_t>(picks[d].size()));
    if (kept[d]) out.shape.push_back(static_cast<index_t>(picks[d].size()));
  }
  for_each(full, [&](index_t, const std::vector<index_t>& idx) {
    std::vector<index_t> src(idx.size());
    for (std::size_t d = 0; d < idx.size(); ++d)
      src[d] = picks[d][static_cast<std::size_t>(idx[d])];
    out.pos.push_back(v.pos[static_cast<std::size_t>(flat_of(v.shape, src))]);
  });
  return out;
}

std::optional<ref_view> ref_permute(const ref_view& v, const std::vector<int>& axes) {
  const int r = static_cast<int>(v.shape.size());
  if (static_cast<int>(axes.size()) != r) return std::nullopt;
  std::vector<int> a(axes.size());
  std::vector<bool> seen(axes.size(), false);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < -r || axes[i] >= r) return std::nullopt;
    a[i] = axes[i] < 0 ? axes[i] + r : axes[i];
    if (seen[static_cast<std::size_t>(a[i])]) return std::nullopt;
    seen[static_cast<std::size_t>(a[i])] = true;
  }
  ref_view out;
  out.writable = v.writable;
  for (int x : a) out.shape.push_back(v.shape[static_cast<std::size_t>(x)]);
  for_each(out.shape, [&](index_t, const std::vector<index_t>& idx) {
    std::vector<index_t> src(idx.size());
    for (std::size_t i = 0; i < idx.size(); ++i) src[static_cast<std::size_t>(a[i])] = idx[i];
    out.pos.push_back(v.pos[static_cast<std::size_t>(flat_of(v.shape, src))]);
  });
  return out;
}

// Reshape keeps the row-major order of the elements. Whether meld can do it without a copy
// depends on the strides; the reference only knows that a contiguous run of the base always can.
std::optional<ref_view> ref_reshape(const ref_view& v, const std::vector<index_t>& to) {
  std::vector<index_t> shape = to;
  int infer = -1;
  wide known = 1;
  bool zero = false;
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer >= 0) return std::nullopt;
      infer = static_cast<int>(i);
    } else if (to[i] < 0) {
      return std::nullopt;
    } else if (to[i] == 0) {
      zero = true;
    } else {
      known *= to[i];
      if (known > std::numeric_limits<index_t>::max()) return std::nullopt;
    }
  }
  if (to.size() > static_cast<std::size_t>(meld::max_rank)) return std::nullopt;
  const index_t n = count_of(v.shape);
  if (zero) known = 0;
  if (infer >= 0) {
    if (known == 0 || n % static_cast<index_t>(known) != 0) return std::nullopt;
    shape[static_cast<std::size_t>(infer)] = n / static_cast<index_t>(known);
  } else if (known != n) {
    return std::nullopt;
  }
  return ref_view{shape, v.pos, v.writable};
}

bool contiguous(const ref_view& v) {
  for (std::size_t i = 1; i < v.pos.size(); ++i)
    if (v.pos[i] != v.pos[0] + static_cast<index_t>(i)) return false;
  return true;
}

std::optional<ref_view> ref_broadcast(const ref_view& v, const std::vector<index_t>& to) {
  if (v.shape.size() > to.size() || !shape_fits(to)) return std::nullopt;
  const std::size_t lead = to.size() - v.shape.size();
  for (std::size_t i = 0; i < v.shape.size(); ++i)
    if (v.shape[i] != to[lead + i] && v.shape[i] != 1) return std::nullopt;
  ref_view out{to, {}, false};
  wide count = 1;
  for (index_t d : to) count *= d;
  if (count > (1 << 20)) {
    out.huge = true;
    return out;
  }
  for_each(to, [&](index_t, const std::vector<index_t>& idx) {
    std::vector<index_t> src(v.shape.size());
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = v.shape[i] == 1 ? 0 : idx[lead + i];
    out.pos.push_back(v.pos[static_cast<std::size_t>(flat_of(v.shape, src))]);
  });
  return out;
}

// numpy's broadcast of two shapes.
std::optional<std::vector<index_t>> ref_broadcast_shapes(const std::vector<index_t>& a,
                                                         const std::vector<index_t>& b) {
  const std::size_t r = std::max(a.size(), b.size());
  std::vector<index_t> out(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    const index_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const index_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  if (!shape_fits(out)) return std::nullopt;
  return out;
}

// ---- the program --------------------------------------------------------------------------------

using view = meld::tensor_view<const double>;
using mutable_view = meld::tensor_view<double>;

struct entry {
  view v;
  std::optional<mutable_view> w;  // for writable views
  ref_view ref;
};

// Applies a view operation to an entry's meld view (the mutable one when it has one).
template <class F>
entry derive(const entry& e, const ref_view& ref, F f) {
  if (e.w) {
    mutable_view m = f(*e.w);
    return {view(m), m, ref};
  }
  return {f(e.v), std::nullopt, ref};
}

// meld's elements of a view, row-major (through a copy, which meld's assignment makes).
std::vector<double> elements(const view& v) {
  const meld::tensor<double> copy(v);
  return {copy.begin(), copy.end()};
}

void check(const entry& e, const std::vector<double>& base) {
  if (from_shape(e.v.shape()) != e.ref.shape) disagree("the shape of a view");
  if (e.ref.huge) return;
  const auto got = elements(e.v);
  for (std::size_t i = 0; i < e.ref.pos.size(); ++i)
    if (got[i] != base[static_cast<std::size_t>(e.ref.pos[i])]) disagree("an element of a view");
}

// Whether meld threw shape_error running f (any other exception escapes and aborts the run).
template <class F>
bool throws(F f) {
  try {
    f();
    return false;
  } catch (const meld::shape_error&) {
    return true;
  }
}

index_t any_index(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 9)) {
    case 0:
      return std::numeric_limits<index_t>::max();
    case 1:
      return std::numeric_limits<index_t>::min();
    case 2:
      return (index_t(1) << 62) + 1;
    case 3:
      return -(index_t(1) << 62);
    default:
      return in.ConsumeIntegralInRange<index_t>(-7, 7);
  }
}

std::vector<index_t> some_shape(FuzzedDataProvider& in, int max_rank_) {
  std::vector<index_t> s(in.ConsumeIntegralInRange<std::size_t>(0, std::size_t(max_rank_)));
  for (index_t& d : s)
    d = in.ConsumeIntegralInRange(0, 12) == 0 ? (index_t(1) << 62) + 1
                                              : in.ConsumeIntegralInRange<index_t>(-1, 5);
  return s;
}

template <class V, class... S>
auto slice_with(const V& v, const std::vector<spec>& specs, const S&... done) {
  if constexpr (sizeof...(S) < 4) {
    if (sizeof...(S) < specs.size()) {
      const spec& s = specs[sizeof...(S)];
      if (s.is_index) return slice_with(v, specs, done..., s.index);
      return slice_with(v, specs, done..., s.r);
    }
  }
  return v.slice(done...);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<index_t> base_shape(in.ConsumeIntegralInRange<std::size_t>(1, 4));
  for (index_t& d : base_shape) d = in.ConsumeIntegralInRange<index_t>(0, 5);
  const index_t n = count_of(base_shape);
  meld::tensor<double> base(to_shape(base_shape));
  std::vector<double> ref_base(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i)
    base.data()[i] = ref_base[static_cast<std::size_t>(i)] = double(i);

  ref_view whole{base_shape, {}, true};
  for (index_t i = 0; i < n; ++i) whole.pos.push_back(i);
  std::vector<entry> views;
  views.push_back({base.view(), base.view(), whole});

  for (int step = 0; step < 24 && in.remaining_bytes() > 0; ++step) {
    const entry& e = views[in.ConsumeIntegralInRange<std::size_t>(0, views.size() - 1)];
    const int rank = static_cast<int>(e.ref.shape.size());
    std::optional<entry> made;
    switch (in.ConsumeIntegralInRange(0, 9)) {
      case 0: {  // slice
        std::vector<spec> specs(in.ConsumeIntegralInRange<std::size_t>(0, 4));
        for (spec& s : specs) {
          s.is_index = in.ConsumeBool();
          if (s.is_index) {
            s.index = any_index(in);
          } else {
            std::optional<index_t> start, stop;
            if (in.ConsumeBool()) start = any_index(in);
            if (in.ConsumeBool()) stop = any_index(in);
            s.r = meld::range(start, stop, in.ConsumeBool() ? any_index(in) : index_t(1));
          }
        }
        const auto ref = ref_slice(e.ref, specs);
        bool threw = throws([&] {
          made.emplace(derive(e, ref ? *ref : ref_view{},
                              [&](const auto& v) { return slice_with(v, specs); }));
        });
        if (threw != !ref) disagree("whether a slice is valid");
        break;
      }
      case 1: {  // transpose
        std::vector<int> axes;
        for (int i = rank - 1; i >= 0; --i) axes.push_back(i);
        made.emplace(
            derive(e, *ref_permute(e.ref, axes), [](const auto& v) { return v.transpose(); }));
        break;
      }
      case 2: {  // permute (any axes, repeated or out of range ones included)
        std::vector<int> axes(static_cast<std::size_t>(
            in.ConsumeBool() ? rank : in.ConsumeIntegralInRange(0, rank + 1)));
        for (int& a : axes) a = in.ConsumeIntegralInRange(-rank - 1, rank);
        const auto ref = ref_permute(e.ref, axes);
        const bool threw = throws([&] {
          meld::dims d;  // (more than max_rank axes are refused here too)
          for (int a : axes) d.push_back(a);
          made.emplace(
              derive(e, ref ? *ref : ref_view{}, [&](const auto& v) { return v.permute(d); }));
        });
        if (threw != !ref) disagree("whether a permutation is valid");
        break;
      }
      case 3: {  // reshape
        std::vector<index_t> to = some_shape(in, 5);
        if (in.ConsumeBool() && !to.empty())  // one extent inferred
          to[in.ConsumeIntegralInRange<std::size_t>(0, to.size() - 1)] = -1;
        const auto ref = ref_reshape(e.ref, to);
        const bool threw = throws([&] {
          made.emplace(derive(e, ref ? *ref : ref_view{},
                              [&](const auto& v) { return v.reshape(to_shape(to)); }));
        });
        if (!ref && !threw) disagree("an invalid reshape was accepted");
        if (ref && threw && contiguous(e.ref)) disagree("a contiguous view could not be reshaped");
        break;
      }
      case 4: {  // broadcast_to: from the view's shape, stretched and extended, or any shape
        std::vector<index_t> to;
        if (in.ConsumeBool()) {
          to = some_shape(in, 6);
        } else {
          to.resize(in.ConsumeIntegralInRange<std::size_t>(0, 2), 2);
          for (index_t d : e.ref.shape)
            to.push_back(d == 1 ? in.ConsumeIntegralInRange<index_t>(0, 4) : d);
        }
        const auto ref = ref_broadcast(e.ref, to);
        bool threw = throws([&] {
          const view b = e.v.broadcast_to(to_shape(to));
          made.emplace(entry{b, std::nullopt, ref ? *ref : ref_view{}});
        });
        if (threw != !ref) disagree("whether a broadcast is valid");
        break;
      }
      case 5: {  // squeeze, unsqueeze
        if (in.ConsumeBool()) {
          ref_view ref{{}, e.ref.pos, e.ref.writable};
          for (index_t d : e.ref.shape)
            if (d != 1) ref.shape.push_back(d);
          made.emplace(derive(e, ref, [](const auto& v) { return v.squeeze(); }));
        } else {
          const int axis = in.ConsumeIntegralInRange(-rank - 2, rank + 1);
          std::optional<ref_view> ref;
          if (axis >= -rank - 1 && axis <= rank && rank < meld::max_rank) {
            ref = ref_view{e.ref.shape, e.ref.pos, e.ref.writable};
            ref->shape.insert(ref->shape.begin() + (axis < 0 ? axis + rank + 1 : axis), 1);
          }
          const bool threw = throws([&] {
            made.emplace(derive(e, ref ? *ref : ref_view{},
                                [&](const auto& v) { return v.unsqueeze(axis); }));
          });
          if (threw != !ref) disagree("whether an unsqueeze is valid");
        }
        break;
      }
      case 6: {  // an expression of two views, broadcast together
        const entry& f = views[in.ConsumeIntegralInRange<std::size_t>(0, views.size() - 1)];
        const auto shape = ref_broadcast_shapes(e.ref.shape, f.ref.shape);
        std::optional<meld::tensor<double>> got;
        const bool threw = throws([&] { got.emplace(e.v * 2.0 - f.v); });
        if (threw != !shape) disagree("whether two shapes broadcast");
        if (!shape) break;
        if (from_shape(got->shape()) != *shape) disagree("the shape of an expression");
        const auto ea = *ref_broadcast(e.ref, *shape), fb = *ref_broadcast(f.ref, *shape);
        for (std::size_t i = 0; i < ea.pos.size(); ++i)
          if (got->data()[i] != 2.0 * ref_base[static_cast<std::size_t>(ea.pos[i])] -
                                    ref_base[static_cast<std::size_t>(fb.pos[i])])
            disagree("an element of an expression");
        break;
      }
      case 7: {  // reductions: all elements, and along an axis (sum and max)
        double total = 0;
        for (index_t p : e.ref.pos) total += ref_base[static_cast<std::size_t>(p)];
        if (meld::sum(e.v) != total) disagree("a sum");
        if (rank == 0) break;
        const int axis = in.ConsumeIntegralInRange(0, rank - 1);
        std::vector<index_t> out_shape = e.ref.shape;
        out_shape.erase(out_shape.begin() + axis);
        std::vector<double> sums(static_cast<std::size_t>(count_of(out_shape)), 0.0),
            maxes(sums.size(), -1e300);
        for_each(e.ref.shape, [&](index_t k, const std::vector<index_t>& idx) {
          std::vector<index_t> o = idx;
          o.erase(o.begin() + axis);
          const auto j = static_cast<std::size_t>(flat_of(out_shape, o));
          const double x =
              ref_base[static_cast<std::size_t>(e.ref.pos[static_cast<std::size_t>(k)])];
          sums[j] += x;
          maxes[j] = std::max(maxes[j], x);
        });
        const meld::tensor<double> s = meld::sum(e.v, axis);
        if (from_shape(s.shape()) != out_shape) disagree("the shape of an axis sum");
        for (std::size_t j = 0; j < sums.size(); ++j)
          if (s.data()[j] != sums[j]) disagree("an axis sum");
        const bool empty_axis = e.ref.shape[static_cast<std::size_t>(axis)] == 0;
        std::optional<meld::tensor<double>> m;
        if (throws([&] { m.emplace(meld::max(e.v, axis)); }) != empty_axis)
          disagree("whether a max along an empty axis is refused");
        if (!empty_axis)
          for (std::size_t j = 0; j < maxes.size(); ++j)
            if (m->data()[j] != maxes[j]) disagree("an axis max");
        break;
      }
      case 8:
      case 9: {  // dst = src + 1 or dst += src, through a writable view (which src may overlap)
        if (!e.w) break;
        const entry& f = views[in.ConsumeIntegralInRange<std::size_t>(0, views.size() - 1)];
        const bool compound = in.ConsumeBool();
        const auto b = ref_broadcast(f.ref, e.ref.shape);
        const bool threw = throws([&] {
          if (compound)
            *e.w += f.v;
          else
            *e.w = f.v + 1.0;
        });
        if (threw != !b) disagree("whether an assignment broadcasts");
        if (!b) {
          if (elements(views[0].v) != ref_base) disagree("a failed assignment changed the tensor");
          break;
        }
        const std::vector<double> before = ref_base;  // as if through a temporary
        for (std::size_t i = 0; i < e.ref.pos.size(); ++i) {
          const double src = before[static_cast<std::size_t>(b->pos[i])];
          double& dst = ref_base[static_cast<std::size_t>(e.ref.pos[i])];
          dst = compound ? before[static_cast<std::size_t>(e.ref.pos[i])] + src : src + 1.0;
        }
        if (elements(views[0].v) != ref_base) disagree("an assignment through a view");
        break;
      }
    }
    if (made) {
      check(*made, ref_base);
      // Kept for later steps if small: their expressions and reductions are materialized.
      const auto& shape = made->ref.shape;
      const bool small = !made->ref.huge && count_of(shape) <= 4096 &&
                         std::all_of(shape.begin(), shape.end(), [](index_t d) { return d <= 64; });
      if (small && views.size() < 8) views.push_back(std::move(*made));
    }
  }
  for (const entry& e : views) check(e, ref_base);
  return 0;
}
