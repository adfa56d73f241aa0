// Execution policies: how an assignment runs. A backend (where) is a template over a policy (how),
// e.g. meld::cpu<meld::sync>; code written for one policy compiles unchanged with the other.
#pragma once

namespace meld {

/// \addtogroup execution
/// @{

/// Execution policy: an operation has finished when the call returns.
struct sync {};

/// Execution policy: an operation is enqueued on an in-order queue (a meld::stream) and the call
/// returns at once; reading the result on the host waits for it.
struct async {};

/// @}

}  // namespace meld
