// The exceptions meld throws. Every message names the operation and the offending values.
#pragma once

#include <cstdio>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "config.hpp"

namespace meld {

/// \addtogroup core
/// @{

/// Shapes that do not fit the operation: broadcasting, reshape, axes, ranks, slices.
class shape_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// An element index outside a tensor's extent.
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

// One argument of cat: text, a number or a character, or (through `append`) any type with a
// str() member (shapes). A message is built from a list of these by one function, compiled once,
// instead of one stream-based builder per list of argument types.
struct cat_arg {
  enum kind_t : unsigned char { text, signed_int, unsigned_int, floating, character, other };
  kind_t kind;
  union {
    const char* s;
    long long i;
    unsigned long long u;
    double d;
    char c;
    const void* p;
  };
  std::size_t n = 0;                               // text: length
  void (*append)(std::string&, const void*) = {};  // other: appends *p

  template <class T>
  cat_arg(const T& v) {  // NOLINT(google-explicit-constructor): cat's arguments convert
    using U = std::decay_t<T>;
    if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> ||
                  std::is_same_v<U, unsigned char>) {
      kind = character;  // as std::ostream writes them
      c = static_cast<char>(v);
    } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
      kind = text;
      if constexpr (std::is_pointer_v<T>) {
        s = v ? v : "";
        n = std::char_traits<char>::length(s);
      } else {
        const std::string_view view(v);
        s = view.data();
        n = view.size();
      }
    } else if constexpr (std::is_enum_v<U>) {
      kind = signed_int;
      i = static_cast<long long>(v);
    } else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) {
      kind = signed_int;
      i = v;
    } else if constexpr (std::is_integral_v<U>) {
      kind = unsigned_int;
      u = v;
    } else if constexpr (std::is_floating_point_v<U>) {
      kind = floating;
      d = static_cast<double>(v);
    } else {
      kind = other;
      p = &v;
      if constexpr (requires { &U::append_text; })
        append = &U::append_text;  // compiled once (dims: in the runtime)
      else
        append = [](std::string& out, const void* q) { out += static_cast<const T*>(q)->str(); };
    }
  }
};

// The text of args[0 .. count): numbers as std::ostream writes them by default (%g for floating
// point). Cold: it runs only on the way to an exception.
[[gnu::cold]] std::string cat_list(const cat_arg* args, int count);

// Any number of values as one string: cat("axis ", 3, " of rank ", 2).
template <class... Args>
std::string cat(const Args&... args) {
  const cat_arg list[] = {cat_arg(args)...};
  return cat_list(list, int(sizeof...(Args)));
}

// Throws E with the text of args[0 .. count). Cold and compiled once per exception type: a throw
// site costs a call, not the construction of a message and an exception.
template <class E>
[[noreturn]] [[gnu::cold]] MELD_ONCE void throw_list(const cat_arg* args, int count) {
  throw E(cat_list(args, count));
}
#if defined(MELD_COMPILED_RUNTIME)
// The exceptions that meld throws: instantiated once, in the runtime library.
extern template void throw_list<shape_error>(const cat_arg*, int);
extern template void throw_list<index_error>(const cat_arg*, int);
extern template void throw_list<allocation_error>(const cat_arg*, int);
extern template void throw_list<std::invalid_argument>(const cat_arg*, int);
#endif

// throw E(cat(args...)), in the code of one call: raise<shape_error>("axis ", 3, " of rank ", 2).
template <class E, class... Args>
[[noreturn]] [[gnu::cold]] void raise(const Args&... args) {
  const cat_arg list[] = {cat_arg(args)...};
  throw_list<E>(list, int(sizeof...(Args)));
}

}  // namespace detail

/// @}

}  // namespace meld

#if MELD_RUNTIME_DEFINITIONS
#include "error-inl.hpp"
#endif
