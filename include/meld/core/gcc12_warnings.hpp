// Included at the start and at the end of each CPU evaluator header (the second inclusion pops).
//
// GCC 12 reports its own AVX-512 intrinsics (the _mm512_undefined_* that xsimd's math uses) as
// uninitialized once they are inlined into meld's loops (GCC PR 105593, fixed in GCC 13). This
// silences that, only inside meld's evaluator, so that users building with -Werror are unaffected.
// No include guard: on purpose.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#ifndef MELD_GCC12_WARNINGS_PUSHED
#define MELD_GCC12_WARNINGS_PUSHED
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#else
#undef MELD_GCC12_WARNINGS_PUSHED
#pragma GCC diagnostic pop
#endif
#endif
