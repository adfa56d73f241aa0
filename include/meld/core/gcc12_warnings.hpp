// MELD_GCC12_WARNINGS_OFF and MELD_GCC12_WARNINGS_ON bracket the CPU evaluator's code, after a
// header's includes and at its end.
//
// GCC 12 reports its own AVX-512 intrinsics (the _mm512_undefined_* that xsimd's math uses) as
// uninitialized once they are inlined into meld's loops (GCC PR 105593, fixed in GCC 13). This
// silences that, only inside meld's evaluator, so that users building with -Werror are unaffected.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define MELD_GCC12_WARNINGS_OFF                                                        \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define MELD_GCC12_WARNINGS_ON _Pragma("GCC diagnostic pop")
#else
#define MELD_GCC12_WARNINGS_OFF
#define MELD_GCC12_WARNINGS_ON
#endif
