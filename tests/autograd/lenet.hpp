// The LeNets of the autograd suites, written with forward only from autograd's layers, and the same
// networks as nn::sequential (the same seeds draw the same parameters):
//   lenet     d2l's, as the training example's: conv 3x3 (20) - ReLU - avg pool 2 - conv 5x5 (50) -
//             ReLU - avg pool 2 - dense 128 - ReLU - dense 10, for 28 x 28 images;
//   lenet_bn  conv 5x5 (6, padding 2) - batch norm - ReLU - max pool 2 - conv 5x5 (16) - batch
//             norm - ReLU - max pool 2 - dropout - dense 10: every other primitive layer.
#pragma once

#include <cstdint>

#include <meld/autograd/autograd.hpp>
#include <meld/nn/nn.hpp>

namespace test {

template <class T, class B>
struct lenet {
  using value_type = T;
  using backend_type = B;
  using variable = meld::autograd::variable<T, B>;
  meld::autograd::layers::conv2d<T, B> c1{1, 20, 3, {.seed = 1}}, c2{20, 50, 5, {.seed = 2}};
  meld::autograd::layers::avg_pool2d<T, B> pool{2};
  meld::autograd::layers::linear<T, B> fc1{800, 128, {.seed = 3}}, fc2{128, 10, {.seed = 4}};

  variable forward(const variable& x) {
    variable h = pool(relu(c1(x)));
    h = pool(relu(c2(h)));
    return fc2(relu(fc1(meld::autograd::reshape(h, {h.shape()[0], -1}))));
  }
  template <class F>
  void parameters(F&& f) {
    meld::autograd::parameters(f, "c1", c1, "c2", c2, "fc1", fc1, "fc2", fc2);
  }
};

template <class T, class B>
auto nn_lenet() {
  namespace nn = meld::nn;
  return nn::sequential(nn::conv2d<T, B>(1, 20, 3, {.seed = 1}), nn::relu<T, B>(),
                        nn::avg_pool2d<T, B>(2), nn::conv2d<T, B>(20, 50, 5, {.seed = 2}),
                        nn::relu<T, B>(), nn::avg_pool2d<T, B>(2), nn::flatten<T, B>(),
                        nn::linear<T, B>(800, 128, {.seed = 3}), nn::relu<T, B>(),
                        nn::linear<T, B>(128, 10, {.seed = 4}));
}

template <class T, class B>
struct lenet_bn {
  using value_type = T;
  using backend_type = B;
  using variable = meld::autograd::variable<T, B>;
  meld::autograd::layers::conv2d<T, B> c1{1, 6, 5, {.padding = 2, .seed = 5}},
      c2{6, 16, 5, {.seed = 6}};
  meld::autograd::layers::batch_norm<T, B> bn1{6}, bn2{16};
  meld::autograd::layers::max_pool2d<T, B> pool{2};
  meld::autograd::layers::dropout<T, B> drop;
  meld::autograd::layers::linear<T, B> fc{400, 10, {.seed = 8}};

  explicit lenet_bn(double dropout) : drop(dropout, 7) {}
  variable forward(const variable& x) {
    variable h = pool(relu(bn1(c1(x))));
    h = pool(relu(bn2(c2(h))));
    return fc(drop(meld::autograd::reshape(h, {h.shape()[0], -1})));
  }
  template <class F>
  void parameters(F&& f) {
    meld::autograd::parameters(f, "c1", c1, "bn1", bn1, "c2", c2, "bn2", bn2, "fc", fc);
  }
  template <class F>
  void buffers(F&& f) {
    meld::autograd::buffers(f, "bn1", bn1, "bn2", bn2);
  }
  void train(bool on) { meld::autograd::train(on, bn1, bn2, drop); }
};

template <class T, class B>
auto nn_lenet_bn(double dropout) {
  namespace nn = meld::nn;
  return nn::sequential(nn::conv2d<T, B>(1, 6, 5, {.padding = 2, .seed = 5}),
                        nn::batch_norm<T, B>(6), nn::relu<T, B>(), nn::max_pool2d<T, B>(2),
                        nn::conv2d<T, B>(6, 16, 5, {.seed = 6}), nn::batch_norm<T, B>(16),
                        nn::relu<T, B>(), nn::max_pool2d<T, B>(2), nn::flatten<T, B>(),
                        nn::dropout<T, B>(dropout, 7), nn::linear<T, B>(400, 10, {.seed = 8}));
}

}  // namespace test
