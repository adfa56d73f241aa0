// One server of a param_server: the shards of the keys it keeps, and the thread that answers
// the workers. Pushes are aggregated per round (the sum of the workers' pushes of that round),
// and a round is applied, with the update rule, once all workers have pushed it (sync, stale) or
// each push at once (async); pulls that may not see the value yet wait in a list, answered when
// their round is applied, or with an error naming the workers that did not push in time.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../ps_rules.hpp"
#include "ps_protocol.hpp"

namespace meld::detail::ps {

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
      : cfg_(c), rule_(std::move(rule)), req_(requests), rep_(replies) {
    workers_.resize(static_cast<std::size_t>(cfg_.workers));
    if (!restore.empty()) load(restore);
  }

  // Serves until every worker has said it is done (or the wait for the last ones timed out).
  // Returns the failure, if any ("" when every worker finished).
  std::string run() {
    dist::backoff idle(std::chrono::hours(1));
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
  struct round_sum {
    std::vector<T> sum;
    std::vector<std::uint8_t> touched;  // per row of the shard
    int count = 0;
  };
  struct waiting_pull {
    message request;  // kept: the sparse form carries its rows
    clock::time_point since;
  };
  struct shard {
    layout where;
    bool ready = false;  // worker 0's init has arrived (or a checkpoint was restored)
    index_t row_begin = 0, rows = 0;
    std::vector<T> value, state;
    std::uint64_t applied = 0;          // rounds applied (sync, stale) or pushes (async)
    std::uint64_t steps = 0;            // updates applied, across restarts (the rule's step)
    std::vector<std::uint64_t> pushed;  // per worker: the last round received
    std::map<std::uint64_t, round_sum> open;
    std::list<waiting_pull> waiting;
    std::vector<message> deferred;  // arrived before the key's init
    index_t elements() const { return rows * where.cols; }
  };
  struct worker_state {
    bool done = false;
    std::uint64_t done_request = 0;
    clock::time_point last_heard = clock::now();
  };

  // ---- receiving ----------------------------------------------------------------------------

  bool receive_all() {
    bool any = false;
    for (int n = 0; n < 64; ++n) {
      int flag = 0;
      MPI_Message handle;
      MPI_Status status;
      message m;
      {
        auto lock = mpi_.lock();
        if (MPI_Improbe(MPI_ANY_SOURCE, request_tag, req_, &flag, &handle, &status) !=
                MPI_SUCCESS ||
            !flag)
          return any;
        int bytes = 0;
        MPI_Get_count(&status, MPI_BYTE, &bytes);
        m.bytes().resize(static_cast<std::size_t>(bytes));
        MPI_Mrecv(m.bytes().data(), bytes, MPI_BYTE, &handle, MPI_STATUS_IGNORE);
      }
      any = true;
      if (m.bytes().size() < sizeof(header)) continue;  // not ours
      handle_message(std::move(m), status.MPI_SOURCE);
    }
    return any;
  }

  void handle_message(message m, int source) {
    const header h = m.head();
    if (h.worker >= 0 && h.worker < cfg_.workers)
      workers_[static_cast<std::size_t>(h.worker)].last_heard = clock::now();
    if (!failure_.empty() && h.kind != op::push && h.kind != op::push_rows) {
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
      s.deferred.push_back(std::move(m));
      return;
    }
    if (!fits(s, m, h)) return;
    if (h.kind == op::push || h.kind == op::push_rows) return on_push(s, m, h);
    if (can_read(s, h)) return answer_pull(s, m, source);
    s.waiting.push_back({std::move(m), clock::now()});
  }

  // Whether a message matches the shard (the workers check their calls; this catches workers
  // that disagree on a key's shape).
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
        const auto* ids = reinterpret_cast<const std::int64_t*>(m.payload());
        for (std::int64_t k = 0; k < h.rows && ok; ++k)
          ok = ids[k] >= s.row_begin && ids[k] < s.row_begin + s.rows;
      }
    }
    if (ok && m.payload_bytes() == want) return true;
    fail_with(
        comm_error::reason::mismatch,
        cat("worker rank ", cfg_.first_worker + h.worker, " sent a message for key ", h.key,
            " that does not fit its shard (rows ", s.row_begin, "..", s.row_begin + s.rows, " of ",
            s.where.rows, " x ", s.where.cols, "): the workers disagree on the key's shape"),
        nullptr, -1);
    if (h.kind == op::pull || h.kind == op::pull_rows)
      reply(error_reply(h, failure_reason_, failure_), cfg_.first_worker + h.worker);
    return false;
  }

  // ---- pushes and rounds ----------------------------------------------------------------------

  void on_push(shard& s, const message& m, const header& h) {
    auto& last = s.pushed[static_cast<std::size_t>(h.worker)];
    if (h.clock != last + 1)
      return fail_with(comm_error::reason::mismatch,
                       cat("worker ", h.worker, " pushed round ", h.clock, " of key ", h.key,
                           " after round ", last),
                       nullptr, -1);
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
    if (r.sum.size() != static_cast<std::size_t>(s.elements())) {  // (async: the last key's)
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
        } catch (const std::exception& e) {  // the workers hear of it, instead of a silence
          fail_with(comm_error::reason::backend,
                    cat("the update rule threw on key ", key, " (elements ", u.offset, " .. ",
                        u.offset + static_cast<index_t>(u.value.size()), "): ", e.what()),
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
      for (const auto& p : s.waiting) {
        const header h = p.request.head();
        waiting[static_cast<std::size_t>(h.worker)] = 1;
        if (now - p.since < cfg_.timeout) continue;
        // The round cannot complete: the training is broken; every pull gets this.
        const std::uint64_t need = h.clock - static_cast<std::uint64_t>(cfg_.mode.lag());
        std::string late;
        for (int w = 0; w < cfg_.workers; ++w)
          if (s.pushed[static_cast<std::size_t>(w)] < need)
            late += cat(late.empty() ? "" : "; ", "worker rank ", cfg_.first_worker + w,
                        " pushed round ", s.pushed[static_cast<std::size_t>(w)]);
        return fail_with(
            comm_error::reason::timeout,
            cat("the pull of key ", key, " by worker rank ", cfg_.first_worker + h.worker,
                " waited ", dist::seconds_str(now - p.since), " for round ", need, " (mode ",
                cfg_.mode.str(), "), which is not complete: ", late,
                " (a worker that died or stalls)"),
            nullptr, -1);
      }
    }
    // A done worker waits for the others; so would this server, for workers that all went
    // silent (died, or stalled) without a word.
    std::string silent;
    int done = 0, quiet = 0;
    for (int w = 0; w < cfg_.workers; ++w) {
      const auto& ws = workers_[static_cast<std::size_t>(w)];
      done += ws.done;
      if (!ws.done && !waiting[static_cast<std::size_t>(w)] &&
          now - ws.last_heard >= cfg_.timeout) {
        ++quiet;
        silent += cat(silent.empty() ? "" : ", ", cfg_.first_worker + w);
      }
    }
    if (finished_ || silent.empty() || (done == 0 && done + quiet < cfg_.workers)) return;
    fail_with(comm_error::reason::timeout,
              cat("worker rank(s) ", silent, " sent nothing for ", dist::seconds_str(cfg_.timeout),
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
    }
  }

  std::string name() const { return cat("meld::param_server server rank ", cfg_.index); }

  // ---- replies --------------------------------------------------------------------------------

  void reply(message m, int dest) {
    sends_.emplace_back();
    pending_send& p = sends_.back();
    p.msg = std::move(m);
    auto lock = mpi_.lock();
    const int rc = MPI_Isend(p.msg.bytes().data(), p.msg.count(), MPI_BYTE, dest,
                             reply_tag(p.msg.head().request), rep_, &p.request);
    if (rc != MPI_SUCCESS) sends_.pop_back();  // a dead worker: its wait reports the server
  }

  bool complete_sends() {
    bool any = false;
    for (auto it = sends_.begin(); it != sends_.end();) {
      int flag = 0;
      {
        auto lock = mpi_.lock();
        if (MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 1;
      }
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

  // One file per server: its keys' shards, rule state and update counts.
  void save(const std::string& path) const {
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw std::runtime_error(cat("cannot write the checkpoint '", tmp, "'"));
      auto put = [&](const void* p, std::size_t n) {
        f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      };
      const std::int64_t head[5] = {magic, cfg_.servers, cfg_.index, rule_.state_slots,
                                    static_cast<std::int64_t>(shards_.size())};
      put(head, sizeof(head));
      for (const auto& [key, s] : shards_) {
        if (!s.ready) continue;
        const std::int64_t k[7] = {key,
                                   s.where.rows,
                                   s.where.cols,
                                   s.where.home,
                                   s.row_begin,
                                   s.rows,
                                   static_cast<std::int64_t>(s.steps)};
        put(k, sizeof(k));
        put(s.value.data(), s.value.size() * sizeof(T));
        put(s.state.data(), s.state.size() * sizeof(T));
      }
      if (!f) throw std::runtime_error(cat("writing the checkpoint '", tmp, "' failed"));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw std::runtime_error(cat("cannot rename '", tmp, "' to '", path, "'"));
  }

  void load(const std::string& prefix) {
    const std::string path = cat(prefix, ".server", cfg_.index);
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(cat(name(), ": cannot read the checkpoint '", path, "'"));
    auto get = [&](void* p, std::size_t n) {
      f.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
      if (!f) throw std::runtime_error(cat(name(), ": the checkpoint '", path, "' is truncated"));
    };
    std::int64_t head[5];
    get(head, sizeof(head));
    if (head[0] != magic || head[1] != cfg_.servers || head[2] != cfg_.index ||
        head[3] != rule_.state_slots)
      throw std::runtime_error(cat(name(), ": the checkpoint '", path, "' is for server ", head[2],
                                   " of ", head[1], " with ", head[3], " state slots, not server ",
                                   cfg_.index, " of ", cfg_.servers, " with ", rule_.state_slots));
    for (std::int64_t n = 0; n < head[4]; ++n) {
      std::int64_t k[7];
      if (!f.read(reinterpret_cast<char*>(k), sizeof(k))) break;  // keys that were not ready
      shard& s = shards_[static_cast<int>(k[0])];
      s.where = {k[1], k[2], cfg_.servers, static_cast<int>(k[3])};
      s.row_begin = k[4];
      s.rows = k[5];
      s.steps = static_cast<std::uint64_t>(k[6]);
      s.value.resize(static_cast<std::size_t>(s.elements()));
      s.state.resize(s.value.size() * static_cast<std::size_t>(rule_.state_slots));
      get(s.value.data(), s.value.size() * sizeof(T));
      get(s.state.data(), s.state.size() * sizeof(T));
      s.pushed.assign(static_cast<std::size_t>(cfg_.workers), 0);
      s.ready = true;
    }
  }

  static constexpr std::int64_t magic = 0x3173702d646c656dLL;  // "meld-ps1"

  config cfg_;
  ps_rule<T> rule_;
  MPI_Comm req_, rep_;
  mpi_calls mpi_;
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
