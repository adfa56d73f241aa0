// The exceptions meld throws. Every message names the operation and the offending values.
#pragma once

#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace meld {

// Shapes that do not fit the operation: broadcasting, reshape, axes, ranks, slices.
class shape_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// An element index outside a tensor's extent.
class index_error : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

/// Memory that cannot be allocated. Derives from std::bad_alloc so that existing handlers catch it,
/// but carries a message with the size that was asked for.
class allocation_error : public std::bad_alloc {
 public:
  /// An error whose what() is the given message.
  explicit allocation_error(std::string what) : what_(std::move(what)) {}
  /// The message: what could not be allocated, and how much.
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

namespace detail {

// Streams any number of values into one string: cat("axis ", 3, " of rank ", 2).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace detail
}  // namespace meld
