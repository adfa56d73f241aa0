// One server of a param_server: the shards of the keys it keeps, and the thread that answers
// the workers. Pushes are aggregated per round (the sum of the workers' pushes of that round),
// and a round is applied, with the update rule, once all workers have pushed it (sync, stale) or
// each push at once (async); pulls that may not see the value yet wait in a list, answered when
// their round is applied, or with an error naming the workers that did not push in time. What a
// shard holds, and the checkpoint file of a server's shards: ps_shards.hpp.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../../core/trace.hpp"
#include "../ps_rules.hpp"
#include "ps_protocol.hpp"
#include "ps_shards.hpp"

namespace meld::detail::ps {

// The text of the exception being handled, whatever its type.
inline std::string current_exception_text() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception of a type not derived from std::exception";
  }
}

template <class T>
class server {
 public:
  struct config {
    int index = 0;  // which server (its rank in the communicator)
    int servers = 1, workers = 1, first_worker = 0;
    ps_mode mode;
    std::chrono::milliseconds timeout;
  };

  server(const config& c, ps_rule<T> rule, MPI_Comm requests, MPI_Comm replies,
         const std::string& restore)
      : cfg_(c),
        rule_(std::move(rule)),
        req_(requests),
        rep_(replies),
        requests_(requests, request_tag) {
    workers_.resize(static_cast<std::size_t>(cfg_.workers));
    if (!restore.empty()) load(restore);
  }

  // Serves until every worker has said it is done (or the wait for the last ones timed out).
  // Returns the failure, if any ("" when every worker finished).
  std::string run() {
    trace_recorder::get().name_thread(cat("ps server ", cfg_.index));
    distributed::backoff idle(std::chrono::hours(1));
    auto last_check = clock::now();
    for (;;) {
      bool progressed = receive_all();
      progressed = complete_sends() || progressed;
      if (clock::now() - last_check > std::chrono::milliseconds(5)) {
        last_check = clock::now();
        check_deadlines();
      }
      if (finished_ && sends_.empty()) return failure_;
      if (finished_ && clock::now() > finish_deadline_) return failure_;  // replies not taken
      if (stop_.load(std::memory_order_relaxed)) return failure_;
      if (progressed)
        idle.progressed();
      else
        idle.pause();
    }
  }

  // Ends run() soon (the owner is shutting down after a failure).
  void stop() { stop_.store(true); }

 private:
  using round_sum = ps::round_sum<T>;
  using shard = ps::shard<T>;
  struct worker_state {
    std::string refused;  // why its last refused request was refused
    bool done = false;
    std::uint64_t done_request = 0;
    clock::time_point last_heard = clock::now();
  };

  // ---- receiving ----------------------------------------------------------------------------

  bool receive_all() {
    bool any = false;
    requests_.poll(mpi_, 64, [&](message&& m, int source) {
      any = true;
      if (m.bytes().size() < sizeof(header)) return;  // not ours
      handle_message(std::move(m), source);
    });
    return any;
  }

  void handle_message(message m, int source) {
    const header h = m.head();
    if (h.kind == op::reply) return;
    // Traced: every request this server handles, with its key and worker.
    static constexpr const char* names[] = {"serve init", "serve push",      "serve push_rows",
                                            "serve pull", "serve pull_rows", "serve checkpoint",
                                            "serve done"};
    const auto kind = static_cast<int>(h.kind);
    trace_scope traced(kind >= 1 && kind <= 7 ? names[kind - 1] : "serve (malformed)", "ps",
                       {"key", h.key}, {"worker", h.worker});
    if (const std::string bad = malformed(m, h, source); !bad.empty())
      return refuse(h, source, cat("a malformed request from rank ", source, ": ", bad));
    workers_[static_cast<std::size_t>(h.worker)].last_heard = clock::now();
    // After a failure every request is answered with it; pushes need no answer, and a worker's
    // done still counts (the server ends once every worker has heard of the failure).
    if (!failure_.empty() && h.kind != op::push && h.kind != op::push_rows && h.kind != op::done) {
      reply(error_reply(h, failure_reason_, failure_), source);
      return;
    }
    switch (h.kind) {
      case op::init:
        return on_init(m, source);
      case op::push:
      case op::push_rows:
      case op::pull:
      case op::pull_rows:
        return on_keyed(std::move(m), source);
      case op::checkpoint:
        return on_checkpoint(m, source);
      case op::done:
        return on_done(h);
      case op::reply:
        return;
    }
  }

  // What is wrong with a request before it reaches a key ("" when nothing): the checks that keep
  // a garbled, truncated or forged message from touching memory it does not describe.
  std::string malformed(const message& m, const header& h, int source) const {
    constexpr std::int64_t max_elements = std::int64_t(1) << 48;
    if (h.kind < op::init || h.kind > op::done)
      return cat("unknown kind ", static_cast<int>(h.kind));
    if (h.worker < 0 || h.worker >= cfg_.workers || source != cfg_.first_worker + h.worker)
      return cat("worker index ", h.worker, " from rank ", source, " (the workers are ranks ",
                 cfg_.first_worker, " .. ", cfg_.first_worker + cfg_.workers - 1, ")");
    if (h.key < 0) return cat("key ", h.key);
    const std::size_t payload = m.payload_bytes();
    switch (h.kind) {
      case op::init: {
        if (h.cols < 1 || h.rows_total < 1 || h.rows_total > max_elements / h.cols || h.home < -1 ||
            h.home >= cfg_.servers)
          return cat("an init of ", h.rows_total, " x ", h.cols, " at home ", h.home);
        const layout l{h.rows_total, h.cols, cfg_.servers, h.home};
        if (h.row_begin != l.begin(cfg_.index) || h.rows != l.end(cfg_.index) - h.row_begin ||
            h.rows < 1)
          return cat("an init of rows ", h.row_begin, " + ", h.rows, " of ", h.rows_total,
                     ", which are not this server's");
        if (payload != static_cast<std::size_t>(h.rows * h.cols) * sizeof(T))
          return cat("an init of ", h.rows * h.cols, " elements with ", payload, " bytes of data");
        return "";
      }
      case op::push:
      case op::pull:
      case op::push_rows:
      case op::pull_rows:
        if (h.rows < 0 || h.rows > max_elements || h.row_begin < 0 || h.row_begin > max_elements)
          return cat("rows ", h.row_begin, " + ", h.rows);
        return "";
      case op::checkpoint:
        if (payload == 0 || std::memchr(m.payload(), 0, payload))
          return "a checkpoint path that is empty or holds a NUL byte";
        return "";
      default:
        return "";
    }
  }

  // Answers a request that cannot be served with an error, changing nothing else. A refused
  // push has no reply to carry the error: it is remembered for the message that names the
  // worker when its round does not complete.
  void refuse(const header& h, int source, const std::string& why) {
    if (h.worker >= 0 && h.worker < cfg_.workers)
      workers_[static_cast<std::size_t>(h.worker)].refused = why;
    reply(error_reply(h, comm_error::reason::mismatch, cat(name(), ": refused ", why)), source);
  }

  void on_init(const message& m, int source) {
    const header h = m.head();
    shard& s = shards_[h.key];
    const layout l{h.rows_total, h.cols, cfg_.servers, h.home};
    if (s.ready) {  // restored from a checkpoint: keep its values if the shapes agree
      if (s.where.rows != l.rows || s.where.cols != l.cols || s.where.home != l.home)
        return fail_with(comm_error::reason::mismatch,
                         cat("key ", h.key, " was restored as ", s.where.rows, " x ", s.where.cols,
                             " but initialized as ", l.rows, " x ", l.cols),
                         &h, source);
    } else {
      s.where = l;
      s.row_begin = h.row_begin;
      s.rows = h.rows;
      const auto n = static_cast<std::size_t>(s.elements());
      s.value.resize(n);
      std::memcpy(s.value.data(), m.payload(), n * sizeof(T));
      s.state.assign(n * static_cast<std::size_t>(rule_.state_slots), T(0));
      s.ready = true;
    }
    if (s.pushed.empty()) s.pushed.assign(static_cast<std::size_t>(cfg_.workers), 0);
    header ack;
    ack.request = h.request;
    ack.key = h.key;
    reply(message(ack), source);
    std::vector<message> later;
    later.swap(s.deferred);
    for (auto& d : later) {
      const int from = cfg_.first_worker + d.head().worker;
      on_keyed(std::move(d), from);
    }
  }

  void on_keyed(message m, int source) {
    const header h = m.head();
    shard& s = shards_[h.key];
    if (!s.ready) {
      if (s.deferred.empty()) s.first_deferred = clock::now();
      s.deferred.push_back(std::move(m));
      return;
    }
    if (!fits(s, m, h)) return;
    if (h.kind == op::push || h.kind == op::push_rows) return on_push(s, m, h);
    if (can_read(s, h)) return answer_pull(s, m, source);
    s.waiting.push_back({std::move(m), clock::now()});
  }

  // Whether a message matches the shard; one that does not is refused (workers that disagree
  // on a key's shape, or a garbled message), and the shard stays as it was.
  bool fits(const shard& s, const message& m, const header& h) {
    const auto cols = static_cast<std::size_t>(s.where.cols);
    std::size_t want = 0;
    bool ok = true;
    if (h.kind == op::push || h.kind == op::pull) {
      ok = h.row_begin == s.row_begin && h.rows == s.rows;
      want = h.kind == op::push ? s.value.size() * sizeof(T) : 0;
    } else {
      want = static_cast<std::size_t>(h.rows) *
             (sizeof(std::int64_t) + (h.kind == op::push_rows ? cols * sizeof(T) : 0));
      if (ok && m.payload_bytes() == want) {
        const auto* ids = m.payload();
        for (std::int64_t k = 0; k < h.rows && ok; ++k) {
          std::int64_t id;  // copied: the payload is not aligned for int64 reads
          std::memcpy(&id, ids + k * static_cast<std::int64_t>(sizeof id), sizeof id);
          ok = id >= s.row_begin && id < s.row_begin + s.rows;
        }
      }
    }
    if (ok && m.payload_bytes() == want) return true;
    refuse(h, cfg_.first_worker + h.worker,
           cat("worker rank ", cfg_.first_worker + h.worker, "'s message for key ", h.key,
               ", which does not fit its shard (rows ", s.row_begin, "..", s.row_begin + s.rows,
               " of ", s.where.rows, " x ", s.where.cols,
               "): the workers disagree on the key's shape"));
    return false;
  }

  // ---- pushes and rounds ----------------------------------------------------------------------

  void on_push(shard& s, const message& m, const header& h) {
    auto& last = s.pushed[static_cast<std::size_t>(h.worker)];
    if (h.clock != last + 1)  // a replayed or forged push: the round is not its next one
      return refuse(h, cfg_.first_worker + h.worker,
                    cat("worker rank ", cfg_.first_worker + h.worker, "'s push of round ", h.clock,
                        " of key ", h.key, " after round ", last));
    last = h.clock;
    if (!failure_.empty()) return;
    const bool async = cfg_.mode.mode == ps_mode::kind::async;
    round_sum& r = async ? scratch_ : s.open[h.clock];
    add(s, r, m, h);
    if (async) {
      apply(s, h.key, r, 1);
      ++s.applied;
    } else {
      // Rounds complete in order: each worker's pushes arrive in the order it sent them.
      for (auto it = s.open.begin();
           it != s.open.end() && it->first == s.applied + 1 && it->second.count == cfg_.workers;
           it = s.open.erase(it)) {
        apply(s, h.key, it->second, cfg_.workers);
        ++s.applied;
      }
    }
    serve_waiting(s);
  }

  void add(shard& s, round_sum& r, const message& m, const header& h) {
    const auto cols = static_cast<std::size_t>(s.where.cols);
    // Async mode's one scratch sum serves every key: sized for the last one, which may have the
    // same element count in other rows.
    if (r.sum.size() != static_cast<std::size_t>(s.elements()) ||
        r.touched.size() != static_cast<std::size_t>(s.rows)) {
      r.sum.assign(static_cast<std::size_t>(s.elements()), T(0));
      r.touched.assign(static_cast<std::size_t>(s.rows), 0);
    }
    ++r.count;
    if (h.kind == op::push) {
      const T* g = reinterpret_cast<const T*>(m.payload());
      for (std::size_t i = 0; i < r.sum.size(); ++i) r.sum[i] += g[i];
      std::fill(r.touched.begin(), r.touched.end(), std::uint8_t(1));
      return;
    }
    const auto* ids = reinterpret_cast<const std::int64_t*>(m.payload());
    const T* g = reinterpret_cast<const T*>(m.payload() + h.rows * sizeof(std::int64_t));
    for (std::int64_t k = 0; k < h.rows; ++k) {
      const auto row = static_cast<std::size_t>(ids[k] - s.row_begin);
      r.touched[row] = 1;
      T* dst = r.sum.data() + row * cols;
      const T* src = g + static_cast<std::size_t>(k) * cols;
      for (std::size_t j = 0; j < cols; ++j) dst[j] += src[j];
    }
  }

  // Runs the rule on every run of touched rows, then clears the sum for reuse.
  void apply(shard& s, int key, round_sum& r, int contributions) {
    const auto cols = static_cast<std::size_t>(s.where.cols);
    const auto rows = static_cast<std::size_t>(s.rows);
    for (std::size_t a = 0; a < rows;) {
      if (!r.touched[a]) {
        ++a;
        continue;
      }
      std::size_t b = a;
      while (b < rows && r.touched[b]) ++b;
      ps_update<T> u;
      u.key = key;
      u.offset = static_cast<index_t>((static_cast<std::size_t>(s.row_begin) + a) * cols);
      u.grad = std::span<const T>(r.sum.data() + a * cols, (b - a) * cols);
      u.value = std::span<T>(s.value.data() + a * cols, (b - a) * cols);
      u.workers = cfg_.workers;
      u.contributions = contributions;
      u.step = s.steps;
      u.state_data = s.state.empty() ? nullptr : s.state.data() + a * cols;
      u.state_stride = s.elements();
      if (!rule_.apply) {
        std::copy(u.grad.begin(), u.grad.end(), u.value.begin());
      } else {
        try {
          rule_.apply(u);
        } catch (...) {  // the workers hear of it, instead of a silence (or a terminate)
          fail_with(
              comm_error::reason::backend,
              cat("the update rule threw on key ", key, " (elements ", u.offset, " .. ",
                  u.offset + static_cast<index_t>(u.value.size()), "): ", current_exception_text()),
              nullptr, -1);
          return;
        }
      }
      a = b;
    }
    ++s.steps;
    std::fill(r.sum.begin(), r.sum.end(), T(0));
    std::fill(r.touched.begin(), r.touched.end(), std::uint8_t(0));
    r.count = 0;
  }

  // ---- pulls ----------------------------------------------------------------------------------

  // Whether a pull may see the value now: the rounds its worker pushed, less the staleness
  // allowed, are applied (async: always).
  bool can_read(const shard& s, const header& h) const {
    if (cfg_.mode.mode == ps_mode::kind::async) return true;
    const auto lag = static_cast<std::uint64_t>(cfg_.mode.lag());
    return h.clock <= lag || s.applied >= h.clock - lag;
  }

  void serve_waiting(shard& s) {
    for (auto it = s.waiting.begin(); it != s.waiting.end();) {
      const header h = it->request.head();
      if (!can_read(s, h)) {
        ++it;
        continue;
      }
      answer_pull(s, it->request, cfg_.first_worker + h.worker);
      it = s.waiting.erase(it);
    }
  }

  void answer_pull(const shard& s, const message& m, int source) {
    const header h = m.head();
    header r;
    r.request = h.request;
    r.key = h.key;
    r.clock = s.applied;
    const auto cols = static_cast<std::size_t>(s.where.cols);
    if (h.kind == op::pull) {
      message out(r, s.value.size() * sizeof(T));
      std::memcpy(out.payload(), s.value.data(), s.value.size() * sizeof(T));
      return reply(std::move(out), source);
    }
    const auto* ids = reinterpret_cast<const std::int64_t*>(m.payload());
    message out(r, static_cast<std::size_t>(h.rows) * cols * sizeof(T));
    T* dst = reinterpret_cast<T*>(out.payload());
    for (std::int64_t k = 0; k < h.rows; ++k)
      std::memcpy(dst + static_cast<std::size_t>(k) * cols,
                  s.value.data() + static_cast<std::size_t>(ids[k] - s.row_begin) * cols,
                  cols * sizeof(T));
    reply(std::move(out), source);
  }

  // ---- deadlines, done, failures --------------------------------------------------------------

  // A pull that waited the whole timeout is answered with an error naming the workers whose
  // pushes it waits for; so is a done worker waiting for workers that went silent.
  void check_deadlines() {
    const auto now = clock::now();
    std::vector<std::uint8_t> waiting(static_cast<std::size_t>(cfg_.workers), 0);
    for (auto& [key, s] : shards_) {
      if (!s.deferred.empty() && now - s.first_deferred >= cfg_.timeout) {
        const header h = s.deferred.front().head();
        return fail_with(
            comm_error::reason::mismatch,
            cat("key ", key, " was used by worker rank ", cfg_.first_worker + h.worker,
                " but never initialized: worker 0 (rank ", cfg_.first_worker,
                ") did not init it within ", distributed::seconds_str(cfg_.timeout),
                " (every worker calls init(key, value) before using a key; worker 0's value is "
                "the one kept)"),
            nullptr, -1);
      }
      for (const auto& p : s.waiting) {
        const header h = p.request.head();
        waiting[static_cast<std::size_t>(h.worker)] = 1;
        if (now - p.since < cfg_.timeout) continue;
        // The round cannot complete: the training is broken; every pull gets this.
        const std::uint64_t need = h.clock - static_cast<std::uint64_t>(cfg_.mode.lag());
        std::string late;
        for (int w = 0; w < cfg_.workers; ++w)
          if (s.pushed[static_cast<std::size_t>(w)] < need) {
            const auto& refused = workers_[static_cast<std::size_t>(w)].refused;
            late += cat(late.empty() ? "" : "; ", "worker rank ", cfg_.first_worker + w,
                        " pushed round ", s.pushed[static_cast<std::size_t>(w)],
                        refused.empty() ? "" : " (refused: ", refused, refused.empty() ? "" : ")");
          }
        return fail_with(
            comm_error::reason::timeout,
            cat("the pull of key ", key, " by worker rank ", cfg_.first_worker + h.worker,
                " waited ", distributed::seconds_str(now - p.since), " for round ", need, " (mode ",
                cfg_.mode.str(), "), which is not complete: ", late,
                " (a worker that died or stalls)"),
            nullptr, -1);
      }
    }
    // A done worker waits for the others: once one worker closed, the ones silent for the
    // timeout are named (died, or stalled). Before that, silence is no failure: workers may
    // compute for longer than the timeout between rounds, and a pull that waits for them fails
    // above in its own time.
    std::string silent;
    int done = 0;
    for (int w = 0; w < cfg_.workers; ++w) {
      const auto& ws = workers_[static_cast<std::size_t>(w)];
      done += ws.done;
      if (!ws.done && !waiting[static_cast<std::size_t>(w)] &&
          now - ws.last_heard >= cfg_.timeout) {
        silent += cat(silent.empty() ? "" : ", ", cfg_.first_worker + w);
      }
    }
    if (finished_ || silent.empty() || done == 0) return;
    fail_with(
        comm_error::reason::timeout,
        cat("worker rank(s) ", silent, " sent nothing for ", distributed::seconds_str(cfg_.timeout),
            done ? " while the others finished" : "", " (a worker that died or stalls)"),
        nullptr, -1);
    finish();
  }

  void on_done(const header& h) {
    auto& w = workers_[static_cast<std::size_t>(h.worker)];
    w.done = true;
    w.done_request = h.request;
    for (const auto& ws : workers_)
      if (!ws.done) return;
    finish();
  }

  // Answers every done worker (with the failure, if any) and ends run() once the replies left.
  void finish() {
    finished_ = true;
    finish_deadline_ = clock::now() + cfg_.timeout;
    for (int w = 0; w < cfg_.workers; ++w) {
      const auto& ws = workers_[static_cast<std::size_t>(w)];
      if (!ws.done) continue;
      header h;
      h.request = ws.done_request;
      reply(failure_.empty() ? message(h) : error_reply(h, failure_reason_, failure_),
            cfg_.first_worker + w);
    }
  }

  // Records a failure: every request from now on (and every waiting pull) is answered with it.
  void fail_with(comm_error::reason why, const std::string& what, const header* req, int source) {
    if (failure_.empty()) {
      failure_ = cat(name(), ": ", what);
      failure_reason_ = why;
    }
    if (req) reply(error_reply(*req, failure_reason_, failure_), source);
    for (auto& [key, s] : shards_) {
      for (auto& p : s.waiting) {
        const header h = p.request.head();
        reply(error_reply(h, failure_reason_, failure_), cfg_.first_worker + h.worker);
      }
      s.waiting.clear();
      for (const auto& d : s.deferred) {
        const header h = d.head();
        if (h.kind == op::pull || h.kind == op::pull_rows)
          reply(error_reply(h, failure_reason_, failure_), cfg_.first_worker + h.worker);
      }
      s.deferred.clear();
    }
  }

  std::string name() const { return cat("meld::param_server server rank ", cfg_.index); }

  // ---- replies --------------------------------------------------------------------------------

  void reply(message m, int dest) {
    sends_.emplace_back();
    pending_send& p = sends_.back();
    p.msg = std::move(m);
    auto lock = mpi_.lock();
    const int rc =
        MPI_Isend(p.msg.bytes().data(), p.msg.count(), MPI_BYTE, dest, reply_tag, rep_, &p.request);
    if (rc != MPI_SUCCESS) sends_.pop_back();  // a dead worker: its wait reports the server
  }

  // Tests at most 256 of the replies in flight, oldest first, and drops the completed ones: a
  // full pass over every pending reply after each batch of requests made 100,000 requests in
  // flight cost quadratic time. (Sends to one worker complete in order, so the oldest are the
  // ones worth testing.)
  bool complete_sends() {
    bool any = false;
    auto lock = mpi_.lock();
    int tested = 0;
    for (auto it = sends_.begin(); it != sends_.end() && tested < 256; ++tested) {
      int flag = 0;
      if (MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 1;
      if (flag) {
        it = sends_.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    return any;
  }

  // ---- checkpoints ----------------------------------------------------------------------------

  void on_checkpoint(const message& m, int source) {
    const header h = m.head();
    const std::string path =
        cat(std::string(reinterpret_cast<const char*>(m.payload()), m.payload_bytes()), ".server",
            cfg_.index);
    header ok;
    ok.request = h.request;
    try {
      save(path);
      reply(message(ok), source);
    } catch (const std::exception& e) {
      reply(error_reply(h, comm_error::reason::backend, cat(name(), ": ", e.what())), source);
    }
  }

  shard_file_owner file_owner() const {
    return {cfg_.servers, cfg_.index, cfg_.workers, rule_.state_slots};
  }
  void save(const std::string& path) const { save_shards(path, shards_, file_owner()); }
  void load(const std::string& prefix) {
    shards_ = load_shards<T>(cat(prefix, ".server", cfg_.index), file_owner(), name());
  }

  config cfg_;
  ps_rule<T> rule_;
  MPI_Comm req_, rep_;
  mpi_calls mpi_;
  probed_receives requests_;
  std::map<int, shard> shards_;
  std::vector<worker_state> workers_;
  std::list<pending_send> sends_;
  round_sum scratch_;  // async: one push at a time
  std::string failure_;
  comm_error::reason failure_reason_ = comm_error::reason::timeout;
  bool finished_ = false;
  clock::time_point finish_deadline_;
  std::atomic<bool> stop_{false};
};

}  // namespace meld::detail::ps
