// Must NOT compile: a type that misses zero_grad() handed to an optimizer. The test that builds
// this file (nn_model_concept_message) checks that the compiler names the missing member.
#include <meld/nn/nn.hpp>

struct almost_a_model {
  using value_type = float;
  using backend_type = meld::cpu<>;
  meld::tensor<float> w{meld::shape_t{2}}, g{meld::shape_t{2}};
  meld::tensor<float> forward(const meld::tensor<float>& x) { return x * w; }
  meld::tensor<float> backward(const meld::tensor<float>& gy) { return gy * w; }
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string_view("w"), w, g);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void train(bool) {}
  almost_a_model replica() const { return {}; }
};

int main() {
  almost_a_model m;
  meld::optim::sgd opt(m, {.lr = 0.1});
  opt.step();
}
