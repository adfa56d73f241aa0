// What benchmarks/same_code.sh compiles against two revisions of meld's headers: the CPU paths the
// benchmarks time (a fused assignment, reductions, a product, convolution and pooling, an
// asynchronous assignment). Never run; only its machine code is compared.
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

using namespace meld;

void probe_assign(tensor<float>& y, const tensor<float>& a, const tensor<float>& x,
                  const tensor<float>& z) {
  y = 2.f * a * x + exp(z);
}
float probe_sum(const tensor<float>& a) {
  return sum(a * a);
}
void probe_reduce_axis(tensor<float>& out, const tensor<float>& a) {
  out = sum(a, 1);
}
void probe_gemm(tensor<float>& c, const tensor<float>& a, const tensor<float>& b) {
  c = matmul(a, b);
}
tensor<float> probe_conv(nn::conv2d<float>& c, const tensor<float>& x) {
  return c.forward(x);
}
tensor<float> probe_pool(nn::max_pool2d<float>& p, const tensor<float>& x) {
  return p.forward(x);
}
void probe_async(tensor<float, cpu<async>>& y, const tensor<float, cpu<async>>& x) {
  y = x * 3.f + 1.f;
}
