// The host backend: meld::cpu, with which a tensor that names no backend (tensor<T>) is evaluated,
// and in which host copies of device tensors live. Code above the backends that works on host
// tensors (nn's layers, the communicators' host buffers, sim's delegation of its kernels to the
// host's) includes this, not the CPU backend's files. (cpu<async> adds backend/cpu/async.hpp,
// which <meld/meld.hpp> includes.)
#pragma once

#include "cpu/executor.hpp"
