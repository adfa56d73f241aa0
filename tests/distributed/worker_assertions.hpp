// Assertions for code that runs on worker threads (inside thread_group::run, a kv_store update).
// Catch2 keeps its assertion state in one process-wide context that is not thread-safe, so
// workers must not call REQUIRE. These evaluate the expression without touching Catch (it may be
// a collective that waits for the other ranks) and report only a failure, under a lock; the
// failure's exception then fails the run on the test's thread.
#pragma once

#include <mutex>

#include "catch.hpp"

namespace meld_test {
inline std::mutex& catch_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace meld_test

#define WORKER_REQUIRE(...)                                               \
  do {                                                                    \
    if (!static_cast<bool>(__VA_ARGS__)) {                                \
      std::lock_guard<std::mutex> worker_lock_(meld_test::catch_mutex()); \
      FAIL("on a worker thread: " #__VA_ARGS__);                          \
    }                                                                     \
  } while (false)

#define WORKER_REQUIRE_THROWS_AS(expression, type) \
  do {                                             \
    bool worker_threw_ = false;                    \
    try {                                          \
      static_cast<void>(expression);               \
    } catch (const type&) {                        \
      worker_threw_ = true;                        \
    }                                              \
    WORKER_REQUIRE(worker_threw_);                 \
  } while (false)
