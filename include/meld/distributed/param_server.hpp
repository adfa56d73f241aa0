// param_server: a parameter server with server and worker roles over MPI (d2l.ai's "Parameter
// Servers", MXNet's KVStore, ps-lite), for training where workers push gradients and pull
// weights whenever they are ready, instead of meeting in a collective. Needs MPI
// (MELD_ENABLE_MPI; link meld::mpi).
//
//   meld::mpi_session mpi(argc, argv);
//   meld::ps_options o;
//   o.servers = 2;                                  // ranks 0 and 1 serve, the others work
//   o.mode = meld::ps_mode::parse("stale:2");       // sync, async or stale:S
//   meld::param_server<float> ps(MPI_COMM_WORLD, o, meld::ps_sgd<float>(0.1f, 0.9f));
//   if (ps.is_worker()) {
//     ps.init(0, weights).wait();                   // every worker; worker 0's value is kept
//     for (...) {
//       auto pushed = ps.push(0, grads);            // non-blocking: returns a handle
//       ps.pull(0, weights).wait();                 // the updated value (see ps_mode)
//     }
//     ps.close();                                   // every worker, when done
//   } else {
//     ps.serve();                                   // a server-only rank: until the workers close
//   }
//
// Roles: ranks 0 .. S-1 of the communicator are servers; the workers are the other ranks, or,
// with `colocated`, every rank (a server rank then also works: its server answers on a thread of
// its own). Keys are non-negative ints; a key's value (rows x cols, or flat) stays whole on
// server `key mod S`, unless it has at least `slice_elements` elements: then it is sliced by rows
// over every server, so that the aggregation and update of m elements costs O(m / S) per server
// instead of O(m) on one (the bottleneck the d2l chapter describes), and each worker's bytes are
// spread over S links.
//
// The update rule (ps_rules.hpp) runs on the servers, on their shards, with its state there.
// Consistency (ps_mode): sync gives the same result as data_parallel's allreduce (the round's
// pushes summed, the rule applied once); async applies each push as it arrives; stale:S lets a
// worker run S rounds ahead of the slowest. A worker's rounds are counted per key: its n-th push
// of a key is round n.
//
// Every operation is non-blocking: push and pull send at once and return a ps_handle, which
// wait() completes (push copies its data, so the caller may reuse it at once; pull writes `out`
// when waited on). A worker can have any number of operations in flight. Sparse forms move only
// some rows of a 2-d value (an embedding table): push_rows and pull_rows.
//
// Faults: nothing waits forever. A server answers a pull that waited `timeout` for workers'
// pushes with an error naming those workers; a worker whose operation gets no answer within twice
// the timeout throws comm_error naming the silent servers; after one worker closed, a server waits
// at most `timeout` for the silent ones, then answers with their names. One thread per worker
// makes the worker calls (the server thread is separate).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm_error.hpp"
#include "communicator.hpp"
#include "detail/ps_protocol.hpp"
#include "detail/ps_server.hpp"
#include "mpi_session.hpp"
#include "ps_handle.hpp"
#include "ps_rules.hpp"

namespace meld {

/// \addtogroup param_server
/// @{

/// Settings of a param_server.
struct ps_options {
  /// How many server ranks (ranks 0 .. servers - 1).
  int servers = 1;
  /// Whether the server ranks also work (every rank a worker); else workers are the other ranks.
  bool colocated = false;
  /// When updates are applied and what a pull may see.
  ps_mode mode;
  /// Values with at least this many elements are sliced over every server.
  index_t slice_elements = index_t(1) << 16;
  /// How long a server waits for workers' pushes (and a worker for a server: twice this).
  /// Default: MELD_COMM_TIMEOUT from the environment, else 10 minutes (see comm_options).
  std::chrono::milliseconds timeout{0};
  /// A checkpoint's path (checkpoint()'s argument): each server starts from its shards there.
  std::string restore;
};

/// A parameter server over the ranks of an MPI communicator: servers keep sharded values and
/// apply an update rule to the workers' pushes; workers push and pull without meeting each other
/// (see the top of this file).
template <class T>
class param_server {
 public:
  /// The element type of the values.
  using value_type = T;

  /// Every rank of `comm` constructs it with the same options (collective).
  param_server(MPI_Comm comm, const ps_options& options = {}, ps_rule<T> rule = ps_assign<T>())
      : options_(options) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    const int n = size_, s = options.servers;
    if (s < 1 || s > n || (!options.colocated && s == n))
      throw std::invalid_argument(detail::cat(
          "param_server: ", s, " servers among ", n, " ranks leave ", options.colocated ? n : n - s,
          " workers; need 1 <= servers <= ranks, and a rank to work (or colocated)"));
    if (options.mode.mode == ps_mode::kind::stale && options.mode.staleness < 0)
      throw std::invalid_argument("param_server: negative staleness");
    if (options.slice_elements < 1)
      throw std::invalid_argument("param_server: slice_elements must be at least 1");
    comm_options co;
    co.timeout = options.timeout;
    timeout_ = detail::distributed::resolve(co, std::chrono::minutes(10), 1).timeout;
    first_worker_ = options.colocated ? 0 : s;
    workers_ = n - first_worker_;
    duplicate(comm);
    if (is_server()) {
      typename detail::ps::server<T>::config c;
      c.index = rank_;
      c.servers = s;
      c.workers = workers_;
      c.first_worker = first_worker_;
      c.mode = options.mode;
      c.timeout = timeout_;
      server_ =
          std::make_unique<detail::ps::server<T>>(c, std::move(rule), req_, rep_, options.restore);
      thread_ = std::thread([this] {
        try {
          server_failure_ = server_->run();
        } catch (const std::exception& e) {
          server_failure_ = detail::cat("meld::param_server server rank ", rank_, ": ", e.what());
        }
      });
    }
  }

  param_server(const param_server&) = delete;
  param_server& operator=(const param_server&) = delete;

  /// A worker that did not close() closes (errors ignored); a server's thread is joined.
  ~param_server() {
    if (is_worker() && !closed_) {
      try {
        close();
      } catch (...) {
      }
    }
    if (thread_.joinable()) {
      if (!failure_->text.empty()) server_->stop();
      thread_.join();
    }
    if (failure_->text.empty() && server_failure_.empty()) {
      auto lock = mpi_.lock();
      MPI_Comm_free(&req_);
      MPI_Comm_free(&rep_);
    }
  }

  /// This rank in the communicator.
  int rank() const { return rank_; }
  /// Whether this rank keeps shards (ranks 0 .. servers - 1).
  bool is_server() const { return rank_ < options_.servers; }
  /// Whether this rank pushes and pulls.
  bool is_worker() const { return rank_ >= first_worker_; }
  /// This worker's index, 0 .. workers() - 1 (rank - the first worker's rank).
  int worker_index() const { return rank_ - first_worker_; }
  /// How many servers.
  int servers() const { return options_.servers; }
  /// How many workers.
  int workers() const { return workers_; }
  /// The consistency mode.
  const ps_mode& mode() const { return options_.mode; }
  /// How long a server waits for workers' pushes (a worker for a server: twice this).
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Declares `key` (every worker, with the same shape; worker 0's value is the initial one,
  /// unless the servers were restored from a checkpoint): a value of value.size() elements,
  /// rows of `row_length` elements (0: flat).
  ps_handle init(int key, std::span<const T> value, index_t row_length = 0) {
    check_worker("init");
    if (key < 0) throw std::invalid_argument(detail::cat("param_server::init: key ", key, " < 0"));
    if (keys_.count(key))
      throw std::invalid_argument(detail::cat("param_server::init: key ", key, " exists"));
    const auto m = static_cast<index_t>(value.size());
    if (m == 0 || row_length < 0 || (row_length > 0 && m % row_length != 0))
      throw shape_error(detail::cat("param_server::init: key ", key, ": ", m,
                                    " elements are not whole rows of ", row_length));
    const index_t cols = row_length > 0 ? row_length : 1;
    const auto l = detail::ps::make_layout(key, m / cols, cols, servers(), options_.slice_elements);
    keys_[key] = {l, 0};
    if (worker_index() != 0) return {};
    auto op = start(detail::cat("init of key ", key));
    for (int s = 0; s < servers(); ++s) {
      const index_t b = l.begin(s), e = l.end(s);
      if (b == e) continue;
      detail::ps::header h = head(detail::ps::op::init, key, 0);
      h.rows_total = l.rows;
      h.cols = cols;
      h.home = l.home;
      h.row_begin = b;
      h.rows = e - b;
      detail::ps::message msg(h, static_cast<std::size_t>((e - b) * cols) * sizeof(T));
      std::memcpy(msg.payload(), value.data() + b * cols, msg.payload_bytes());
      send(*op, s, std::move(msg));
      expect(*op, s, h.request, 0, {});
    }
    return ps_handle(std::move(op));
  }

  /// Pushes this worker's next round of `key` (the whole value): each server aggregates it into
  /// the round and applies the rule per the mode. The data is copied: reuse `grad` at once.
  ps_handle push(int key, std::span<const T> grad) {
    auto& k = find(key, "push", grad.size());
    const std::uint64_t round = ++k.pushes;
    auto op = start(detail::cat("push of key ", key, " (round ", round, ")"));
    for (int s = 0; s < servers(); ++s) {
      const index_t b = k.where.begin(s), e = k.where.end(s);
      if (b == e) continue;
      detail::ps::header h = head(detail::ps::op::push, key, round);
      h.row_begin = b;
      h.rows = e - b;
      detail::ps::message msg(h, static_cast<std::size_t>((e - b) * k.where.cols) * sizeof(T));
      std::memcpy(msg.payload(), grad.data() + b * k.where.cols, msg.payload_bytes());
      send(*op, s, std::move(msg));
    }
    return ps_handle(std::move(op));
  }

  /// Fetches the value of `key` into `out` (written when the handle is waited on): in sync mode
  /// the value after every round this worker pushed; stale:S, after all but the last S; async,
  /// what the servers hold now.
  ps_handle pull(int key, std::span<T> out) {
    auto& k = find(key, "pull", out.size());
    auto op = start(detail::cat("pull of key ", key, " (after round ", k.pushes, ")"));
    for (int s = 0; s < servers(); ++s) {
      const index_t b = k.where.begin(s), e = k.where.end(s);
      if (b == e) continue;
      detail::ps::header h = head(detail::ps::op::pull, key, k.pushes);
      h.row_begin = b;
      h.rows = e - b;
      send(*op, s, detail::ps::message(h));
      const auto bytes = static_cast<std::size_t>((e - b) * k.where.cols) * sizeof(T);
      T* dst = out.data() + b * k.where.cols;
      expect(*op, s, h.request, bytes,
             [dst, bytes](const detail::ps::message& m) { std::memcpy(dst, m.payload(), bytes); });
    }
    return ps_handle(std::move(op));
  }

  /// Pushes rows `rows` of a 2-d `key` (values: rows.size() x row length, row i for rows[i]; a
  /// row given twice adds twice); the other rows count as zero in the round.
  ps_handle push_rows(int key, std::span<const index_t> rows, std::span<const T> values) {
    auto& k = find_rows(key, "push_rows", rows, values.size());
    const std::uint64_t round = ++k.pushes;
    auto op = start(detail::cat("push_rows of key ", key, " (round ", round, ")"));
    const auto by_server = group(k.where, rows);
    const auto cols = static_cast<std::size_t>(k.where.cols);
    for (int s = 0; s < servers(); ++s) {
      if (k.where.begin(s) == k.where.end(s)) continue;  // no shard there
      const auto& mine = by_server[static_cast<std::size_t>(s)];
      detail::ps::header h = head(detail::ps::op::push_rows, key, round);
      h.rows = static_cast<std::int64_t>(mine.size());
      detail::ps::message msg(h, mine.size() * (sizeof(std::int64_t) + cols * sizeof(T)));
      auto* ids = reinterpret_cast<std::int64_t*>(msg.payload());
      T* vals = reinterpret_cast<T*>(msg.payload() + mine.size() * sizeof(std::int64_t));
      for (std::size_t i = 0; i < mine.size(); ++i) {
        ids[i] = rows[mine[i]];
        std::memcpy(vals + i * cols, values.data() + mine[i] * cols, cols * sizeof(T));
      }
      send(*op, s, std::move(msg));
    }
    return ps_handle(std::move(op));
  }

  /// Fetches rows `rows` of a 2-d `key` into `out` (rows.size() x row length), with the
  /// consistency of pull().
  ps_handle pull_rows(int key, std::span<const index_t> rows, std::span<T> out) {
    auto& k = find_rows(key, "pull_rows", rows, out.size());
    auto op = start(detail::cat("pull_rows of key ", key, " (after round ", k.pushes, ")"));
    auto by_server = group(k.where, rows);
    const auto cols = static_cast<std::size_t>(k.where.cols);
    for (int s = 0; s < servers(); ++s) {
      auto& mine = by_server[static_cast<std::size_t>(s)];
      if (mine.empty()) continue;
      detail::ps::header h = head(detail::ps::op::pull_rows, key, k.pushes);
      h.rows = static_cast<std::int64_t>(mine.size());
      detail::ps::message msg(h, mine.size() * sizeof(std::int64_t));
      auto* ids = reinterpret_cast<std::int64_t*>(msg.payload());
      for (std::size_t i = 0; i < mine.size(); ++i) ids[i] = rows[mine[i]];
      send(*op, s, std::move(msg));
      T* dst = out.data();
      const std::size_t bytes = mine.size() * cols * sizeof(T);  // before `mine` is moved from
      expect(*op, s, h.request, bytes,
             [dst, cols, positions = std::move(mine)](const detail::ps::message& m) {
               const T* src = reinterpret_cast<const T*>(m.payload());
               for (std::size_t i = 0; i < positions.size(); ++i)
                 std::memcpy(dst + positions[i] * cols, src + i * cols, cols * sizeof(T));
             });
    }
    return ps_handle(std::move(op));
  }

  /// Each server writes its shards, the rule's state and the update counts to
  /// `path.server<rank>` (one worker calls it; in sync mode after its pull of a round, that
  /// round's values). ps_options::restore = path starts servers from it.
  ps_handle checkpoint(const std::string& path) {
    check_worker("checkpoint");
    auto op = start(detail::cat("checkpoint to '", path, "'"));
    for (int s = 0; s < servers(); ++s) {
      detail::ps::header h = head(detail::ps::op::checkpoint, 0, 0);
      detail::ps::message msg(h, path.size());
      std::memcpy(msg.payload(), path.data(), path.size());
      send(*op, s, std::move(msg));
      expect(*op, s, h.request, 0, {});
    }
    return ps_handle(std::move(op));
  }

  /// A worker that is done: tells every server, and waits until every worker is done (so a
  /// server's error about a worker that never finished reaches the others). Then, on a rank that
  /// is also a server, waits for its thread.
  void close() {
    if (!is_worker())
      throw std::logic_error(
          detail::cat("param_server::close: rank ", rank_, " is a server only (it calls serve())"));
    if (closed_) throw std::logic_error("param_server::close: this worker has closed");
    closed_ = true;
    // Told even after a failure: a server waits for every worker's word before it ends. (Then
    // briefly: the servers may be the ones that failed.)
    const bool failed = !failure_->text.empty();
    auto op = start("close");
    if (failed)
      op->deadline = detail::ps::clock::now() +
                     std::min<std::chrono::milliseconds>(timeout_ / 2, std::chrono::seconds(2));
    for (int s = 0; s < servers(); ++s) {
      detail::ps::header h = head(detail::ps::op::done, 0, 0);
      send(*op, s, detail::ps::message(h));
      expect(*op, s, h.request, 0, {});
    }
    std::exception_ptr error;
    try {
      ps_handle(std::move(op)).wait();
    } catch (...) {
      error = std::current_exception();
    }
    if (thread_.joinable()) {
      if (error) server_->stop();
      thread_.join();
    }
    if (error) std::rethrow_exception(error);
    if (!server_failure_.empty()) throw comm_error(comm_error::reason::timeout, server_failure_);
  }

  /// On a server-only rank: serves until every worker has closed; throws comm_error naming the
  /// workers that did not (died or stalled) within the timeout.
  void serve() {
    if (!is_server() || is_worker())
      throw std::logic_error(detail::cat("param_server::serve: rank ", rank_,
                                         " is not a server-only rank (workers call close())"));
    if (thread_.joinable()) thread_.join();
    if (!server_failure_.empty()) throw comm_error(comm_error::reason::timeout, server_failure_);
  }

 private:
  struct key_info {
    detail::ps::layout where;
    std::uint64_t pushes = 0;  // rounds this worker pushed
  };

  void duplicate(MPI_Comm comm) {
    MPI_Request reqs[2];
    {
      auto lock = mpi_.lock();
      MPI_Comm_idup(comm, &req_, &reqs[0]);
      MPI_Comm_idup(comm, &rep_, &reqs[1]);
    }
    detail::distributed::backoff wait(timeout_);
    for (int flag = 0;; wait.pause()) {
      {
        auto lock = mpi_.lock();
        MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE);
        if (flag) {
          MPI_Comm_set_errhandler(req_, MPI_ERRORS_RETURN);
          MPI_Comm_set_errhandler(rep_, MPI_ERRORS_RETURN);
          router_ = std::make_shared<detail::ps::reply_router>(rep_);
          return;
        }
      }
      if (wait.expired()) {
        detail::distributed::mpi_failed().store(true);
        failure_->text = "construction timed out";
        throw comm_error(comm_error::reason::timeout,
                         detail::cat("meld::param_server rank ", rank_,
                                     ": constructing it timed "
                                     "out: not every rank constructed one (MPI_Comm_idup)"));
      }
    }
  }

  void check_worker(const char* what) const {
    if (!is_worker())
      throw std::logic_error(detail::cat("param_server::", what, ": rank ", rank_,
                                         " is a server only (ranks ", first_worker_, " .. ",
                                         size_ - 1, " work)"));
    if (closed_)
      throw std::logic_error(detail::cat("param_server::", what, ": this worker has closed"));
    if (!failure_->text.empty())
      throw comm_error(failure_->why,
                       detail::cat("meld::param_server worker rank ", rank_,
                                   ": refused: an earlier operation failed: ", failure_->text));
  }

  key_info& find(int key, const char* what, std::size_t n) {
    check_worker(what);
    auto it = keys_.find(key);
    if (it == keys_.end())
      throw std::invalid_argument(
          detail::cat("param_server::", what, ": unknown key ", key, " (init it first)"));
    if (static_cast<index_t>(n) != it->second.where.elements())
      throw shape_error(detail::cat("param_server::", what, ": key ", key, " holds ",
                                    it->second.where.elements(), " elements, the buffer has ", n));
    return it->second;
  }

  key_info& find_rows(int key, const char* what, std::span<const index_t> rows, std::size_t n) {
    check_worker(what);
    auto it = keys_.find(key);
    if (it == keys_.end())
      throw std::invalid_argument(
          detail::cat("param_server::", what, ": unknown key ", key, " (init it first)"));
    const auto& l = it->second.where;
    if (static_cast<index_t>(n) != static_cast<index_t>(rows.size()) * l.cols)
      throw shape_error(detail::cat("param_server::", what, ": ", rows.size(), " rows of key ", key,
                                    " (rows of ", l.cols, " elements) need ", rows.size() * l.cols,
                                    " elements, the buffer has ", n));
    for (const index_t r : rows)
      if (r < 0 || r >= l.rows)
        throw std::out_of_range(detail::cat("param_server::", what, ": row ", r, " of key ", key,
                                            " is outside 0 .. ", l.rows - 1));
    return it->second;
  }

  // Positions in `rows` per server.
  static std::vector<std::vector<std::size_t>> group(const detail::ps::layout& l,
                                                     std::span<const index_t> rows) {
    std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(l.servers));
    for (std::size_t i = 0; i < rows.size(); ++i)
      out[static_cast<std::size_t>(l.server_of(rows[i]))].push_back(i);
    return out;
  }

  detail::ps::header head(detail::ps::op kind, int key, std::uint64_t clock) {
    detail::ps::header h;
    h.kind = kind;
    h.key = key;
    h.worker = worker_index();
    h.clock = clock;
    h.request = ++requests_;
    return h;
  }

  std::shared_ptr<detail::ps::operation> start(std::string what) {
    throttle();
    auto op = std::make_shared<detail::ps::operation>();
    op->what = std::move(what);
    op->rank = rank_;
    op->failure = failure_;
    op->deadline = detail::ps::clock::now() + 2 * timeout_;
    op->router = router_;
    sending_.push_back(op);
    return op;
  }

  // Flow control: at most max_sending operations whose sends MPI has not completed. Open MPI's
  // progress engine walks its pending sends on every call, so with 100,000 of them each call
  // crawled; past the limit a new operation waits here for the oldest sends to go out (their
  // replies may still be outstanding: those operations stay in flight).
  static constexpr std::size_t max_sending = 1024;
  void throttle() {
    detail::distributed::backoff pause(2 * timeout_);
    while (sending_.size() >= max_sending) {
      bool sent = true;
      {
        auto lock = mpi_.lock();
        for (auto& s : sending_.front()->sends) {
          int flag = 0;
          if (MPI_Test(&s.request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 1;
          sent = sent && flag;  // (a failed send is reported by its operation's handle)
        }
      }
      if (sent) {
        sending_.pop_front();
        pause.progressed();
        continue;
      }
      router_->poll(mpi_);  // replies keep arriving meanwhile
      if (pause.expired()) {
        failure_->text = detail::cat(
            "meld::param_server worker rank ", rank_, ": no server took a request for ",
            detail::distributed::seconds_str(2 * timeout_), " (a server that died or stalls)");
        failure_->why = comm_error::reason::timeout;
        throw comm_error(failure_->why, failure_->text);
      }
      pause.pause();
    }
  }

  void send(detail::ps::operation& op, int server, detail::ps::message msg) {
    op.sends.emplace_back();
    auto& s = op.sends.back();
    s.msg = std::move(msg);
    s.dest = server;
    auto lock = mpi_.lock();
    const int rc = MPI_Isend(s.msg.bytes().data(), s.msg.count(), MPI_BYTE, server,
                             detail::ps::request_tag, req_, &s.request);
    if (rc != MPI_SUCCESS)
      throw comm_error(comm_error::reason::backend,
                       detail::cat("meld::param_server worker rank ", rank_, ": the ", op.what,
                                   ": sending to server rank ", server,
                                   " failed: ", detail::ps::mpi_error_text(rc)));
  }

  void expect(detail::ps::operation& op, int server, std::uint64_t request, std::size_t bytes,
              std::function<void(const detail::ps::message&)> done) {
    auto& r = op.replies.emplace_back();
    r.server = server;
    r.request = request;
    r.bytes = bytes;
    r.done = std::move(done);
    router_->expect(r);
  }

  ps_options options_;
  int rank_ = 0, size_ = 1, first_worker_ = 0, workers_ = 1;
  std::chrono::milliseconds timeout_{0};
  detail::ps::mpi_calls mpi_;
  MPI_Comm req_ = MPI_COMM_NULL, rep_ = MPI_COMM_NULL;
  std::map<int, key_info> keys_;
  std::uint64_t requests_ = 0;
  bool closed_ = false;
  std::shared_ptr<detail::ps::worker_failure> failure_ =
      std::make_shared<detail::ps::worker_failure>();
  std::shared_ptr<detail::ps::reply_router> router_;
  std::deque<std::shared_ptr<detail::ps::operation>> sending_;  // oldest first
  std::unique_ptr<detail::ps::server<T>> server_;
  std::string server_failure_;
  std::thread thread_;  // last: joined before the rest goes
};

/// @}

}  // namespace meld
