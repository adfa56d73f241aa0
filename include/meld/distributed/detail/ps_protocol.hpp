// What a param_server's workers and servers agree on: where each key's value lives (its layout
// over the servers), the messages they exchange, and the MPI plumbing both sides use (duplicated
// communicators, serialized calls below MPI_THREAD_MULTIPLE, polling against a deadline).
//
// Messages are one MPI message each, a header followed by a payload: requests travel from
// workers to servers on one communicator (one tag), replies from servers to workers on another,
// tagged by the request's number, so a worker's receives never meet a server thread's probes
// in the same process (a rank may be both).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "../comm_error.hpp"
#include "../mpi_session.hpp"
#include "../ps_mode.hpp"
#include "mpi_endpoint.hpp"

namespace meld {

namespace detail::ps {

using clock = std::chrono::steady_clock;

enum class op : std::int32_t {
  init = 1,
  push,
  push_rows,
  pull,
  pull_rows,
  checkpoint,
  done,
  reply
};

// status of a reply: 0 ok, else 1 + comm_error::reason, the message text as payload.
struct header {
  op kind = op::reply;
  std::int32_t key = 0;
  std::int32_t worker = 0;  // the worker's index
  std::int32_t status = 0;
  std::int32_t home = 0;  // init: the layout's home server (-1: sliced)
  std::int32_t reserved = 0;
  std::uint64_t clock = 0;    // push: the round (1, 2, ...); pull: rounds this worker pushed
  std::uint64_t request = 0;  // what the reply is tagged with
  std::int64_t rows_total = 0, cols = 0;
  std::int64_t row_begin = 0, rows = 0;  // the slice, or (sparse) how many row indices follow
};

// Requests travel on one communicator, replies on another, each with one tag: a worker matches a
// reply to its operation by the request number in the reply's header, not by the tag (MPI
// guarantees only 32,767 tags, and a worker may have any number of operations in flight).
inline constexpr int request_tag = 1;
inline constexpr int reply_tag = 2;

// Where a key's value lives: a value of rows x cols (cols = 1 for a flat one) stays whole on
// server `key mod S` (so that the keys spread over the servers), unless it has at least
// `slice_elements` elements: then server s keeps rows [rows s / S, rows (s + 1) / S).
struct layout {
  index_t rows = 0, cols = 1;
  int servers = 1;
  int home = 0;  // -1: sliced over every server
  index_t begin(int s) const {
    if (home < 0) return rows * s / servers;
    return s <= home ? 0 : rows;
  }
  index_t end(int s) const {
    if (home < 0) return rows * (s + 1) / servers;
    return s < home ? 0 : rows;
  }
  index_t elements() const { return rows * cols; }
  // The server keeping row r.
  int server_of(index_t r) const {
    if (home >= 0) return home;
    int s = static_cast<int>(r * servers / rows);  // then correct the rounding
    while (s > 0 && begin(s) > r) --s;
    while (s + 1 < servers && end(s) <= r) ++s;
    return s;
  }
};

inline layout make_layout(int key, index_t rows, index_t cols, int servers,
                          index_t slice_elements) {
  layout l;
  l.rows = rows;
  l.cols = cols;
  l.servers = servers;
  l.home = (servers > 1 && rows * cols >= slice_elements) ? -1 : key % servers;
  return l;
}

// A message: header and payload in one buffer.
class message {
 public:
  message() = default;
  explicit message(const header& h, std::size_t payload_bytes = 0)
      : bytes_(sizeof(header) + payload_bytes) {
    std::memcpy(bytes_.data(), &h, sizeof(header));
  }
  header head() const {
    header h;
    std::memcpy(&h, bytes_.data(), sizeof(header));
    return h;
  }
  std::byte* payload() { return bytes_.data() + sizeof(header); }
  const std::byte* payload() const { return bytes_.data() + sizeof(header); }
  std::size_t payload_bytes() const { return bytes_.size() - sizeof(header); }
  std::vector<std::byte>& bytes() { return bytes_; }
  int count() const {
    if (bytes_.size() > static_cast<std::size_t>(INT_MAX))
      throw std::length_error(cat("param_server: a message of ", bytes_.size(),
                                  " bytes exceeds MPI's int count; use smaller keys"));
    return static_cast<int>(bytes_.size());
  }

 private:
  std::vector<std::byte> bytes_;
};

// The longest error text a server sends (a longer one is cut there).
inline constexpr std::size_t error_text_max = 1024;

inline message error_reply(const header& req, comm_error::reason why, const std::string& full) {
  const std::string text = full.substr(0, error_text_max);
  header h;
  h.kind = op::reply;
  h.key = req.key;
  h.request = req.request;
  h.status = 1 + static_cast<int>(why);
  message m(h, text.size());
  std::memcpy(m.payload(), text.data(), text.size());
  return m;
}

// MPI calls of this process, serialized below MPI_THREAD_MULTIPLE (a rank may run a server
// thread beside its worker).
class mpi_calls {
 public:
  mpi_calls() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      throw std::logic_error("param_server: MPI is not initialized (use meld::mpi_session)");
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
      throw std::logic_error(
          "param_server: MPI was initialized below MPI_THREAD_SERIALIZED; servers answer on a "
          "thread of their own (use meld::mpi_session or MPI_THREAD_MULTIPLE)");
    serialize_ = provided < MPI_THREAD_MULTIPLE;
  }
  std::unique_lock<std::recursive_mutex> lock() const {
    return serialize_ ? std::unique_lock<std::recursive_mutex>(distributed::mpi_mutex())
                      : std::unique_lock<std::recursive_mutex>();
  }

 private:
  bool serialize_ = false;
};

inline std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

// Sends one message without waiting; the buffer lives until the send completes.
struct pending_send {
  MPI_Request request = MPI_REQUEST_NULL;
  message msg;
  int dest = 0;
};

// The messages of one tag, each received at the size it has: probed (MPI_Improbe), then received
// without waiting (MPI_Imrecv). A matched receive that waited (MPI_Mrecv) would hang on a large
// message whose sender's link broke after its first fragment, with the protocol's deadlines
// stopped; here they keep running. Messages of one source are delivered in the order they were
// sent, as MPI matched them; one source whose message is stuck holds up no other.
class probed_receives {
 public:
  probed_receives(MPI_Comm comm, int tag) : comm_(comm), tag_(tag) {}
  probed_receives(const probed_receives&) = delete;
  probed_receives& operator=(const probed_receives&) = delete;
  // Receives still in flight (a broken link's) keep their buffers: MPI may yet write into them,
  // and a matched receive cannot be cancelled. They are leaked, never freed under MPI.
  ~probed_receives() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (auto& r : flight_)
      if (r.request != MPI_REQUEST_NULL && !finalized) {
        MPI_Request_free(&r.request);
        static_cast<void>(new message(std::move(r.msg)));  // leaked (see above)
      }
  }

  // Starts receiving what has arrived (at most `limit` new messages), then calls
  // deliver(message&&, source) for each received one, in order per source. Returns MPI's error
  // code of the first call that failed (MPI_SUCCESS when none did) and what it was doing.
  template <class Deliver>
  int poll(const mpi_calls& mpi, int limit, Deliver&& deliver, const char** what = nullptr) {
    auto fail = [&](int rc, const char* doing) {
      if (what) *what = doing;
      return rc;
    };
    std::vector<arrival> done;
    {
      auto lock = mpi.lock();
      for (int n = 0; n < limit; ++n) {
        int flag = 0;
        MPI_Message handle;
        MPI_Status status;
        int rc = MPI_Improbe(MPI_ANY_SOURCE, tag_, comm_, &flag, &handle, &status);
        if (rc != MPI_SUCCESS) return fail(rc, "probing for messages");
        if (!flag) break;
        int bytes = 0;
        MPI_Get_count(&status, MPI_BYTE, &bytes);
        arrival& a = flight_.emplace_back();
        a.source = status.MPI_SOURCE;
        a.msg.bytes().resize(static_cast<std::size_t>(bytes));
        rc = MPI_Imrecv(a.msg.bytes().data(), bytes, MPI_BYTE, &handle, &a.request);
        if (rc != MPI_SUCCESS) {
          flight_.pop_back();
          return fail(rc, "receiving a message");
        }
      }
      // Completed receives leave in order per source (a source held up by an unfinished one
      // keeps the rest of its messages for a later poll).
      std::vector<int> held;
      for (auto it = flight_.begin(); it != flight_.end();) {
        if (std::find(held.begin(), held.end(), it->source) != held.end()) {
          ++it;
          continue;
        }
        int flag = 0;
        const int rc = MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return fail(rc, "receiving a message");
        if (!flag) {
          held.push_back(it->source);
          ++it;
          continue;
        }
        done.push_back(std::move(*it));
        it = flight_.erase(it);
      }
    }
    for (arrival& a : done) deliver(std::move(a.msg), a.source);
    return MPI_SUCCESS;
  }

 private:
  struct arrival {
    MPI_Request request = MPI_REQUEST_NULL;
    message msg;
    int source = 0;
  };
  MPI_Comm comm_;
  int tag_;
  std::list<arrival> flight_;  // a list: MPI writes into the buffers, which must not move
};

}  // namespace detail::ps
}  // namespace meld
