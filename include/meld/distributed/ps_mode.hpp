// ps_mode: the consistency modes of meld::param_server (sync, async, stale:S), and their text
// form for command lines. Needs no MPI.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "../core/error.hpp"

namespace meld {

/// \addtogroup param_server
/// @{

/// How a param_server's servers order updates and reads.
struct ps_mode {
  /// sync: a round's update is applied once every worker's push of that round has arrived, and a
  /// pull waits for the rounds this worker pushed (the result of an allreduce);
  /// async: each push is applied as it arrives and pulls are answered at once;
  /// stale: updates as in sync, but a worker's pull waits only until the round `staleness` behind
  /// its own is applied, so it runs at most `staleness` rounds ahead of the slowest (0 is sync).
  enum class kind { sync, async, stale };
  kind mode = kind::sync;  ///< which of the three
  int staleness = 0;       ///< for stale: how many rounds a worker may run ahead of the slowest

  /// "sync", "async" or "stale:S" (S >= 0); throws std::invalid_argument naming the text.
  static ps_mode parse(std::string_view text) {
    if (text == "sync") return {};
    if (text == "async") return {kind::async, 0};
    if (text.substr(0, 6) == "stale:" && text.size() > 6 &&
        text.find_first_not_of("0123456789", 6) == std::string_view::npos && text.size() < 15)
      return {kind::stale, std::stoi(std::string(text.substr(6)))};
    throw std::invalid_argument(
        detail::cat("ps_mode: '", text, "' is not sync, async or stale:S (S a whole number)"));
  }
  /// The text parse() reads.
  std::string str() const {
    return mode == kind::sync    ? "sync"
           : mode == kind::async ? "async"
                                 : detail::cat("stale:", staleness);
  }
  /// Rounds a pull may lag behind the worker's own pushes (sync: 0).
  int lag() const { return mode == kind::stale ? staleness : 0; }
};

/// @}

}  // namespace meld
