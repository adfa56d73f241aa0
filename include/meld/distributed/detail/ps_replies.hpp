// A param_server worker's operations in flight and the replies they wait for. Every reply reaches
// the worker through one router, which reads the request number in the reply's header and hands
// the reply to the operation waiting for it: replies arrive in any order, any number of
// operations may be in flight, and each reply is received at the size its message has (probed
// first), so neither a tag that wraps nor a receive sized too small can mix or cut them.
#pragma once

#include <mpi.h>

#include <climits>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../core/trace.hpp"
#include "ps_protocol.hpp"

namespace meld::detail::ps {

// What the handles of one worker share: the first failure, after which every operation refuses,
// and the failed operations whose sends MPI had not completed (kept alive, so that MPI reads
// memory that is still there).
struct worker_failure {
  std::string text;
  comm_error::reason why = comm_error::reason::timeout;
  std::vector<std::shared_ptr<void>> graveyard;
};

// A reply an operation waits for: from which server, for which request, and what to do with it.
struct expected_reply {
  int server = 0;
  std::uint64_t request = 0;
  std::size_t bytes = 0;                     // the payload of a successful reply
  std::function<void(const message&)> done;  // takes the reply's payload
  message reply;
  bool received = false;
};

// Receives the replies of one worker and delivers each to the operation that expects it.
class reply_router {
 public:
  explicit reply_router(MPI_Comm replies) : receives_(replies, reply_tag) {}

  void expect(expected_reply& r) { waiting_[{r.request, r.server}] = &r; }
  // An operation that failed: a reply that still comes is dropped.
  void forget(const expected_reply& r) { waiting_.erase({r.request, r.server}); }

  // Receives every reply that has arrived. Throws comm_error when MPI fails.
  void poll(const mpi_calls& mpi) {
    const char* what = "";
    const int rc = receives_.poll(
        mpi, INT_MAX,
        [&](message&& m, int source) {
          if (m.bytes().size() < sizeof(header)) return;  // not a reply of this protocol
          const auto it = waiting_.find({m.head().request, source});
          if (it == waiting_.end()) return;  // of an operation that failed
          it->second->reply = std::move(m);
          it->second->received = true;
          waiting_.erase(it);
        },
        &what);
    if (rc != MPI_SUCCESS) throw mpi_failure(what, rc);
  }

 private:
  static comm_error mpi_failure(const char* what, int rc) {
    return comm_error(comm_error::reason::backend,
                      cat("meld::param_server: ", what, " failed: ", mpi_error_text(rc)));
  }

  probed_receives receives_;
  std::map<std::pair<std::uint64_t, int>, expected_reply*> waiting_;
};

// One operation of a worker: its sends, and the replies it waits for (a deque: the router keeps
// pointers to them). Traced from its start to its completion, named by `what`.
struct operation {
  std::string what;  // "pull of key 3", for messages
  int rank = 0;
  std::vector<pending_send> sends;
  std::deque<expected_reply> replies;
  clock::time_point deadline;
  std::shared_ptr<worker_failure> failure;
  std::shared_ptr<reply_router> router;
  mpi_calls mpi;
  bool finished = false;
  std::int64_t trace_begin = trace_enabled() ? trace_now() : -1;

  void finish() {
    finished = true;
    if (trace_begin < 0) return;
    try {
      trace_recorder::get().record(
          trace_event{trace_begin, trace_now(), nullptr, "ps", {{"rank", rank}, {}, {}}, what});
    } catch (...) {  // no memory for the event: the trace misses it
    }
  }
};

}  // namespace meld::detail::ps
