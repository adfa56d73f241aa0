// Execution policies: how an assignment runs. A backend (where) is a template over a policy (how),
// e.g. meld::cpu<meld::sync>; code written for one policy compiles unchanged with the other.
#pragma once

namespace meld {

// An operation has finished when the call returns.
struct sync {};

// An operation is enqueued on an in-order queue and the call returns at once; reading the result
// on the host waits for it.
struct async {};

}  // namespace meld
