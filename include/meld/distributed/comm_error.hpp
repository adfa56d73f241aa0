// meld::comm_error: what every communicator and data_parallel throw when a collective cannot
// complete: a peer that never arrives (timeout), ranks that call different collectives
// (mismatch), a peer that failed and aborted the group, or an error reported by MPI or NCCL.
#pragma once

#include <stdexcept>
#include <string>

namespace meld {

/// \addtogroup distributed
/// @{

/// A collective that failed: a rank that did not arrive in time, ranks that called different
/// collectives, an aborted group or an error of MPI or NCCL. The message names the ranks and the
/// call; why() tells which kind.
class comm_error : public std::runtime_error {
 public:
  /// Why a collective failed.
  enum class reason {
    timeout,   ///< a peer did not arrive or did not make progress within the timeout
    mismatch,  ///< ranks called different collectives (debug mode)
    aborted,   ///< another rank (or the user) aborted the group; the message says why
    backend,   ///< MPI or NCCL reported an error
  };

  /// An error of kind why with the message what.
  comm_error(reason why, const std::string& what) : std::runtime_error(what), why_(why) {}

  /// The kind of failure.
  reason why() const noexcept { return why_; }

 private:
  reason why_;
};

/// @}

}  // namespace meld
