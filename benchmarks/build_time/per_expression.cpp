// The compile time of each further expression in one translation unit: EXPRESSIONS (0 to 8)
// distinct expressions, each assigned to a tensor (AUTOGRAD=0) or differentiated (AUTOGRAD=1: a
// variable<double> of the expression, whose sum's backward runs the fused backward of each input).
// benchmarks/build_time/per_expression.sh compiles it with several counts and prints the seconds
// each further expression adds.
#if AUTOGRAD
#include <meld/autograd/autograd.hpp>
#else
#include <meld/essentials.hpp>
#endif

#ifndef EXPRESSIONS
#define EXPRESSIONS 1
#endif

int main() {
#if AUTOGRAD
  using B = meld::cpu<meld::sync>;
  using V = meld::autograd::variable<double, B>;
  V a(meld::tensor<double, B>({3, 4}), true), b(meld::tensor<double, B>({3, 4}), true);
#define MELD_PROBE(e)                  \
  {                                    \
    V y = e;                           \
    meld::autograd::sum(y).backward(); \
  }
#else
  meld::tensor<float> a({1000}), b({1000}), y({1000});
#define MELD_PROBE(e) y = e;
#endif
  using meld::exp, meld::tanh, meld::sigmoid, meld::sqrt, meld::log, meld::maximum;
#if EXPRESSIONS >= 1
  MELD_PROBE(a * b + exp(a))
#endif
#if EXPRESSIONS >= 2
  MELD_PROBE(tanh(a) - b)
#endif
#if EXPRESSIONS >= 3
  MELD_PROBE(a * a * b)
#endif
#if EXPRESSIONS >= 4
  MELD_PROBE(sigmoid(a) + b * 2.0)
#endif
#if EXPRESSIONS >= 5
  MELD_PROBE(maximum(a, b) * a)
#endif
#if EXPRESSIONS >= 6
  MELD_PROBE(sqrt(a * a + 1.0) - b)
#endif
#if EXPRESSIONS >= 7
  MELD_PROBE(log(b * b + 1.0) * a)
#endif
#if EXPRESSIONS >= 8
  MELD_PROBE((a + b) / (a * a + 2.0))
#endif
  return 0;
}
