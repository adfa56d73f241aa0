// meld::ps_handle: a param_server operation in flight (push, pull, init, checkpoint), completed by
// wait(). Needs MPI (MELD_ENABLE_MPI; link meld::mpi).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm_error.hpp"
#include "detail/ps_replies.hpp"

namespace meld {

/// \addtogroup param_server
/// @{

template <class T>
class param_server;

/// An operation in flight (push, pull, init, checkpoint): wait() completes it, throwing
/// comm_error when a server reported an error or did not answer in time. A handle destroyed
/// without wait() waits then; an error it meets then fails the worker (its next call throws).
class ps_handle {
 public:
  /// A completed operation.
  ps_handle() = default;
  /// Takes over another handle's operation.
  ps_handle(ps_handle&&) noexcept = default;
  /// Waits for this handle's operation (see the destructor), then takes over other's.
  ps_handle& operator=(ps_handle&& other) noexcept {
    if (this != &other) {
      settle_quietly();
      op_ = std::move(other.op_);
    }
    return *this;
  }
  ~ps_handle() { settle_quietly(); }

  /// Whether the operation has completed (progresses it; throws like wait()).
  bool test() { return !op_ || step(); }

  /// Waits until the operation completes; throws comm_error on a server's error or a timeout.
  void wait() {
    if (!op_) return;
    detail::distributed::backoff pause(std::chrono::hours(1));
    while (!step()) pause.pause();
  }

 private:
  template <class T>
  friend class param_server;
  explicit ps_handle(std::shared_ptr<detail::ps::operation> op) : op_(std::move(op)) {}

  void settle_quietly() noexcept {
    if (!op_ || op_->finished) return;
    try {
      wait();
    } catch (...) {  // recorded in op_->failure by step()
    }
  }

  // One round of progress: true when complete.
  bool step() {
    auto& op = *op_;
    if (op.finished) return true;
    try {
      bool all = true;
      {
        auto lock = op.mpi.lock();
        for (auto& s : op.sends) {
          int flag = 0;
          const int rc = MPI_Test(&s.request, &flag, MPI_STATUS_IGNORE);
          if (rc != MPI_SUCCESS)
            fail(comm_error::reason::backend,
                 detail::cat("sending failed: ", detail::ps::mpi_error_text(rc)));
          all = all && flag;
        }
      }
      op.router->poll(op.mpi);
      for (auto& r : op.replies) {
        all = all && r.received;
        if (!r.received) continue;
        const detail::ps::header h = r.reply.head();
        if (h.status != 0) {
          const auto* text = reinterpret_cast<const char*>(r.reply.payload());
          fail(static_cast<comm_error::reason>(h.status - 1),
               std::string(text, r.reply.payload_bytes()));
        }
        if (r.reply.payload_bytes() != r.bytes)
          fail(comm_error::reason::backend,
               detail::cat("server rank ", r.server, " answered with ", r.reply.payload_bytes(),
                           " bytes, not ", r.bytes));
      }
      if (all) {
        for (auto& r : op.replies)
          if (r.done) r.done(r.reply);
        op.finish();
        return true;
      }
      if (detail::ps::clock::now() > op.deadline) {
        // The servers that did not take a message or did not answer.
        std::vector<int> silent;
        for (const auto& s : op.sends)
          if (s.request != MPI_REQUEST_NULL) silent.push_back(s.dest);
        for (const auto& r : op.replies)
          if (!r.received) silent.push_back(r.server);
        std::sort(silent.begin(), silent.end());
        silent.erase(std::unique(silent.begin(), silent.end()), silent.end());
        fail(comm_error::reason::timeout,
             detail::cat("no answer from server ", detail::distributed::ranks_str(silent),
                         " in time (a server that died or stalls)"));
      }
      return false;
    } catch (...) {
      op.finish();
      throw;
    }
  }

  [[noreturn]] void fail(comm_error::reason why, const std::string& what) {
    auto& op = *op_;
    const std::string text = detail::cat("meld::param_server worker rank ", op.rank, ": the ",
                                         op.what, " failed: ", what);
    for (const auto& r : op.replies)
      if (!r.received) op.router->forget(r);
    if (op.failure->text.empty()) {
      op.failure->text = text;
      op.failure->why = why;
    }
    // Sends MPI has not completed read the operation's buffers: keep them.
    op.failure->graveyard.push_back(op_);
    throw comm_error(why, text);
  }

  std::shared_ptr<detail::ps::operation> op_;
};

/// @}

}  // namespace meld
