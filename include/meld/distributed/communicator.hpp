// The communicator concept: a group of `size()` ranks that run collectives together, in the same
// order on every rank. Backends: thread_comm (threads of one process), mpi_comm (processes,
// through MPI), nccl_comm (GPUs, through NCCL).
//
// Collectives work in place on contiguous buffers (std::span, or a meld::tensor for the CPU
// backends):
//   allreduce(buf, op)              every rank ends with op over all ranks' buf (sum, max, min)
//   broadcast(buf, root)            every rank ends with root's buf
//   reduce_scatter(in, out, op)     in has size() * out.size() elements; rank r gets op over all
//                                   ranks of in[r * m, (r + 1) * m) in out (m = out.size())
//   allgather(in, out)              out has size() * in.size() elements; out[r * m ...] = rank r's
//   in barrier()                       returns when every rank has entered it
// and each in an asynchronous form (allreduce_async, ...) that returns a request whose wait()
// returns when the collective has completed on this rank (rethrowing its error). The buffers must
// stay alive and untouched until then.
// These public forms are written once, in collectives.hpp (meld::collectives, which every
// communicator derives from); a communicator implements the transport.
//
// Every collective has a sequence number (1, 2, ... on each rank, in call order). In debug mode
// ranks exchange (sequence, operation, element type, count, root) before any data moves, and a
// mismatch throws comm_error naming the ranks and what each called. Every wait has a timeout: a
// rank that never arrives makes the others throw comm_error naming it and the pending collective.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/element_type.hpp"
#include "../core/error.hpp"
#include "../core/trace.hpp"
#include "comm_error.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// How allreduce and reduce_scatter combine the ranks' elements.
enum class reduce_op : std::uint8_t { sum, max, min };

/// The kinds of collective (in debug descriptions and error messages).
enum class collective_kind : std::uint8_t {
  allreduce,
  broadcast,
  reduce_scatter,
  allgather,
  barrier
};

/// "sum", "max" or "min".
inline const char* name_of(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return "sum";
    case reduce_op::max:
      return "max";
    case reduce_op::min:
      return "min";
  }
  return "?";
}

/// The collective's name, "allreduce", "broadcast", ...
inline const char* name_of(collective_kind k) {
  switch (k) {
    case collective_kind::allreduce:
      return "allreduce";
    case collective_kind::broadcast:
      return "broadcast";
    case collective_kind::reduce_scatter:
      return "reduce_scatter";
    case collective_kind::allgather:
      return "allgather";
    case collective_kind::barrier:
      return "barrier";
  }
  return "?";
}

/// Settings every backend takes. Zero / unset fields take the backend's default.
struct comm_options {
  /// How long a collective waits for a peer that makes no progress before it throws comm_error.
  /// Default: MELD_COMM_TIMEOUT from the environment (seconds, rounded up to whole milliseconds;
  /// `inf`, `none` or 0: wait forever), else 60 s for threads and 10 min for MPI and NCCL. A
  /// timeout of `forever` or more (milliseconds::max() included) waits forever.
  std::chrono::milliseconds timeout{0};
  /// Exchange and compare every collective's description before moving data. Default:
  /// MELD_COMM_DEBUG=1 in the environment.
  std::optional<bool> debug;
  /// Pipelining granularity of the ring algorithms (bytes). Default: the backend's.
  std::size_t slice_bytes = 0;

  /// "Wait forever": 100 years, short enough that a deadline `now + 2 * forever` still fits in
  /// the steady clock's nanoseconds, so no deadline arithmetic can overflow.
  static constexpr std::chrono::milliseconds forever = std::chrono::hours(24 * 365 * 100);
};

namespace detail::distributed {

// The element types communicators carry: those with an element code, arithmetic ones only (the
// reduction kernels add, multiply and compare elements in their own type, which bfloat16 is not
// computed in).
template <class T>
inline constexpr bool carried_element = std::is_arithmetic_v<T>&& element_code<T>() != 0;
template <class T>
concept comm_element = carried_element<std::remove_const_t<T>>;

// What one rank called: the unit that debug mode exchanges and error messages print.
struct call_info {
  std::uint64_t seq = 0;  // 1, 2, ... per rank; 0: nothing called yet
  std::int64_t count = 0;
  std::int32_t root = -1;
  collective_kind kind = collective_kind::barrier;
  reduce_op op = reduce_op::sum;
  std::uint8_t type = 0;

  friend bool operator==(const call_info&, const call_info&) = default;

  std::string str() const {
    if (seq == 0) return "no collective yet";
    std::string s = cat(name_of(kind), " #", seq);
    if (kind == collective_kind::barrier) return s;
    s += " (";
    if (kind == collective_kind::allreduce || kind == collective_kind::reduce_scatter)
      s += cat(name_of(op), ", ");
    s += cat(element_code_name(type), " x ", count);
    if (kind == collective_kind::broadcast) s += cat(", root ", root);
    return s + ")";
  }
};

template <class T>
call_info make_call(std::uint64_t seq, collective_kind kind, std::int64_t count,
                    reduce_op op = reduce_op::sum, int root = -1) {
  call_info c;
  c.seq = seq;
  c.kind = kind;
  c.count = count;
  c.op = op;
  c.root = root;
  c.type = element_code<std::remove_const_t<T>>();
  return c;
}

// An argument that the collectives issued on this thread carry in traces (a gradient bucket's
// number: trace_collective_tag); set only while tracing.
inline thread_local trace_arg collective_tag{};

// Tags the collectives issued on this thread in its scope with `tag` (when tracing).
class trace_collective_tag {
 public:
  explicit trace_collective_tag(trace_arg tag) noexcept : set_(trace_enabled()) {
    if (set_) [[unlikely]]
      collective_tag = tag;
  }
  ~trace_collective_tag() {
    if (set_) [[unlikely]]
      collective_tag = {};
  }
  trace_collective_tag(const trace_collective_tag&) = delete;
  trace_collective_tag& operator=(const trace_collective_tag&) = delete;

 private:
  bool set_;
};

// MELD_COMM_TIMEOUT in seconds: a number >= 0 (strtod's syntax), `inf` or `none`. 0, `inf`,
// `none` and anything above comm_options::forever mean forever; a fraction of a millisecond
// rounds up to one (1e-4 would otherwise become 0, a timeout that fails every wait).
inline std::chrono::milliseconds env_timeout(std::chrono::milliseconds fallback) {
  const char* env = std::getenv("MELD_COMM_TIMEOUT");
  if (!env) return fallback;
  if (std::string_view(env) == "none") return comm_options::forever;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(env, &end);
  if (s == 0 && errno == ERANGE) return std::chrono::milliseconds(1);  // 1e-400: tiny, not 0
  if (end == env || *end != '\0' || !(s >= 0))                         // (NaN fails s >= 0)
    throw std::invalid_argument(
        cat("MELD_COMM_TIMEOUT='", env,
            "' is not a timeout: expected seconds >= 0 (e.g. 30 or 0.5), or inf, none or 0 to wait "
            "forever"));
  const double ms = std::ceil(s * 1000);
  if (s == 0 || !(ms < static_cast<double>(comm_options::forever.count())))
    return comm_options::forever;  // inf and 1e300 included
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(ms));
}

inline bool env_debug() {
  const char* env = std::getenv("MELD_COMM_DEBUG");
  return env && env[0] == '1';
}

// The options with every default filled in.
struct resolved_options {
  std::chrono::milliseconds timeout;
  bool debug;
  std::size_t slice_bytes;
};

inline resolved_options resolve(const comm_options& o, std::chrono::milliseconds default_timeout,
                                std::size_t default_slice) {
  if (o.timeout.count() < 0)
    throw std::invalid_argument(cat("comm_options: negative timeout ", o.timeout.count(), " ms"));
  const auto timeout = o.timeout.count() > 0 ? o.timeout : env_timeout(default_timeout);
  return {std::min(timeout, comm_options::forever), o.debug.value_or(env_debug()),
          o.slice_bytes ? o.slice_bytes : default_slice};
}

inline std::string seconds_str(std::chrono::nanoseconds d) {
  return cat(static_cast<double>(d.count()) / 1e9, " s");
}

// "ranks 1, 3" / "rank 2"
template <class Range>
std::string ranks_str(const Range& ranks) {
  std::string s;
  int n = 0;
  for (int r : ranks) s += cat(n++ ? ", " : "", r);
  return cat(n == 1 ? "rank " : "ranks ", s);
}

}  // namespace detail::distributed

/// What an asynchronous collective returns: `wait()` returns once the collective has completed on
/// this rank (rethrowing its error), `ready()` says whether it has, without blocking. The buffers
/// must stay alive and untouched until then.
template <class R>
concept comm_request_type = requires(R& r) {
  r.wait();
  { r.ready() } -> std::convertible_to<bool>;
};

/// A communicator: a group of `size()` ranks (this one is `rank()`) that run the collectives
/// together, in the same order on every rank (this header's opening comment says what each
/// does): allreduce, broadcast, reduce_scatter, allgather and barrier, each also as an `_async`
/// form that returns a comm_request_type. `next_sequence()` is the number the next collective
/// will carry, and `abort(reason)` marks the group failed, so that peers waiting in a collective
/// throw comm_error naming this rank instead of hanging. data_parallel trains over any of them:
/// thread_comm, mpi_comm and nccl_comm, each of which checks itself with
/// `static_assert(meld::communicator<...>)`. Checked with float buffers here; the communicators
/// take every element type.
template <class C>
concept communicator = requires(C& c, std::span<float> buf, std::span<const float> in, int root) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.allreduce(buf, reduce_op::sum);
  c.broadcast(buf, root);
  c.reduce_scatter(in, buf, reduce_op::sum);
  c.allgather(in, buf);
  c.barrier();
  { c.allreduce_async(buf, reduce_op::sum) } -> comm_request_type;
  { c.broadcast_async(buf, root) } -> comm_request_type;
  { c.reduce_scatter_async(in, buf, reduce_op::sum) } -> comm_request_type;
  { c.allgather_async(in, buf) } -> comm_request_type;
  { c.barrier_async() } -> comm_request_type;
  // The next collective's sequence number; a failed group refuses new collectives.
  { c.next_sequence() } -> std::convertible_to<std::uint64_t>;
  // Marks the group failed (peers waiting in a collective throw comm_error naming this rank).
  c.abort(std::string());
};

/// @}

}  // namespace meld
