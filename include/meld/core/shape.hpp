// Shapes and strides: a fixed-capacity list of up to max_rank indices.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <string>

#include "checked.hpp"
#include "config.hpp"
#include "error.hpp"

namespace meld {

/// \addtogroup core
/// @{

/// A list of at most max_rank signed indices: the shape or the strides of a tensor.
/// Trivially copyable and allocation-free, so that expressions can carry it to a GPU kernel.
class dims {
 public:
  constexpr dims() = default;

  /// dims{2, 3}. Throws shape_error for more than max_rank entries.
  dims(std::initializer_list<index_t> values);

  /// The entries of any range of integers (std::vector<int>, std::array<std::size_t, N>, ...).
  /// Throws shape_error for more than max_rank entries.
  template <class Range>
  requires requires(const Range& r) {
    std::begin(r);
    std::end(r);
  }
  explicit dims(const Range& values) { assign(std::begin(values), std::end(values)); }

  /// n copies of value.
  static dims filled(int n, index_t value) {
    dims d;
    d.resize(n, value);
    return d;
  }

  /// The number of entries (the rank).
  MELD_HD constexpr int size() const { return rank_; }
  /// Whether there are no entries (rank 0).
  MELD_HD constexpr bool empty() const { return rank_ == 0; }
  /// Entry i, in [0, size()); not checked.
  MELD_HD constexpr index_t& operator[](int i) { return v_[i]; }
  /// Entry i, in [0, size()); not checked.
  MELD_HD constexpr const index_t& operator[](int i) const { return v_[i]; }
  /// The entries, contiguous.
  MELD_HD constexpr index_t* data() { return v_; }
  /// The entries, contiguous.
  MELD_HD constexpr const index_t* data() const { return v_; }
  /// Iteration over the entries.
  MELD_HD constexpr index_t* begin() { return v_; }
  /// Iteration over the entries.
  MELD_HD constexpr index_t* end() { return v_ + rank_; }
  /// Iteration over the entries.
  MELD_HD constexpr const index_t* begin() const { return v_; }
  /// Iteration over the entries.
  MELD_HD constexpr const index_t* end() const { return v_ + rank_; }
  /// The last entry; size() must not be 0.
  index_t back() const { return v_[rank_ - 1]; }

  /// Appends an entry. Throws shape_error at max_rank entries.
  void push_back(index_t value) {
    check_rank(rank_ + 1, "dims::push_back");
    v_[rank_++] = value;
  }
  /// Inserts an entry before position pos. Throws shape_error at max_rank entries.
  void insert(int pos, index_t value) {
    check_rank(rank_ + 1, "dims::insert");
    for (int i = rank_; i > pos; --i) v_[i] = v_[i - 1];
    v_[pos] = value;
    ++rank_;
  }
  /// Removes entry pos.
  void erase(int pos) {
    for (int i = pos; i + 1 < rank_; ++i) v_[i] = v_[i + 1];
    --rank_;
  }
  /// n entries: the first ones kept, new ones set to value.
  void resize(int n, index_t value = 0) {
    check_rank(n, "dims::resize");
    for (int i = rank_; i < n; ++i) v_[i] = value;
    rank_ = n;
  }

  /// Same rank and entries.
  // (The loop is not unrolled: shapes are compared in many places of each expression, and g++
  // -O3 peeled it into ~40 instructions at each, a quarter of a one-expression program's code.)
  friend MELD_INLINE bool operator==(const dims& a, const dims& b) {
    if (a.rank_ != b.rank_) return false;
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC unroll 1
#endif
    for (int i = 0; i < a.rank_; ++i)
      if (a.v_[i] != b.v_[i]) return false;
    return true;
  }

  /// Product of the entries (the element count of a shape); 1 for rank 0. Unchecked: every shape
  /// meld builds passed checked_size, whose product cannot overflow.
  MELD_HD constexpr index_t product() const {
    index_t p = 1;
    // A plain loop (see operator==); the early exit on 0 also keeps g++ from vectorizing it.
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC unroll 1
#endif
    for (int i = 0; i < rank_; ++i) {
      if (v_[i] == 0) return 0;
      p *= v_[i];
    }
    return p;
  }

  /// The entries as text, "{2, 3}".
  /// (Cold and not inlined: it serves error messages, and need not cost compile time at -O3.)
  std::string str() const;
  /// Appends str() to out (*d is a dims): how error messages write shapes.
  static void append_text(std::string& out, const void* d);
  /// Writes str().
  friend std::ostream& operator<<(std::ostream& os, const dims& d) {
    return os << d.str();
  }

 private:
  static void check_rank(long n, const char* what) {
    if (n < 0 || n > max_rank)
      detail::raise<shape_error>(what, ": rank ", n, " exceeds meld::max_rank (", max_rank, ")");
  }
  template <class It>
  void assign(It first, It last) {
    check_rank(static_cast<long>(std::distance(first, last)), "shape");
    rank_ = 0;
    for (; first != last; ++first) v_[rank_++] = static_cast<index_t>(*first);
  }

  index_t v_[max_rank] = {};
  int rank_ = 0;
};

/// A tensor's shape: its extent along each axis.
using shape_t = dims;
/// A tensor's strides: elements between neighbours along each axis (negative for reversed views).
using strides_t = dims;

/// Checks that a shape can describe a tensor or a view: no negative extent, and the product of its
/// nonzero extents fits in index_t (numpy's rule: {0, 2^62, 2^62} is refused too, since its
/// row-major strides would overflow). Returns the element count. `what` names the operation.
index_t checked_size(const shape_t& shape, const char* what);

/// Row-major (C order) strides of a shape, in elements. (Extents of 0 count as 1, so that the
/// strides of an empty shape are those of the same shape with 1s: any would do.)
strides_t row_major_strides(const shape_t& shape);

/// Maps a possibly negative axis (Python style: -1 is the last) into [0, rank).
inline int normalize_axis(long axis, int rank, const char* what) {
  if (axis < -rank || axis >= rank)
    detail::raise<shape_error>(what, ": axis ", axis, " is out of range for a tensor of rank ",
                               rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

/// @}

}  // namespace meld

#if MELD_RUNTIME_DEFINITIONS
#include "shape-inl.hpp"
#endif
