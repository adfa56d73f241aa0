// <meld/essentials.hpp> alone is enough for tensors, expressions, reductions, products and
// random draws on the CPU (synchronous): it is a documented entry point, so its includes must not
// rely on what <meld/meld.hpp> brings in besides.
#include <meld/essentials.hpp>

float essentials_header_program() {
  meld::tensor<float> x = meld::uniform<float>({64}, -1.f, 1.f, 1), z = meld::ones<float>({64});
  meld::tensor<float> y = 1.5f * x + -0.75f * z + x * z;
  meld::tensor<float> a = meld::ones<float>({4, 4});
  meld::tensor<float> p = meld::matmul(a, a);
  y += meld::exp(z);
  return meld::sum(y * z) + p(0, 0);
}
