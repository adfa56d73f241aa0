// Small models and losses that satisfy nn::model / nn::loss, for the distributed tests and
// benchmarks (independent of meld's nn layers): a multilayer perceptron (linear layers with tanh
// or relu between them) with a buffer (a running mean of its inputs, like batch-norm statistics),
// mean squared error, and softmax cross-entropy.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <meld/meld.hpp>

namespace toy {

using meld::index_t;

enum class activation { tanh, relu };

// Hooks: whether backward(grad, hook) reports each gradient as soon as its layer is done.
template <class T = float, bool Hooks = true>
class mlp {
 public:
  using value_type = T;
  using backend_type = meld::cpu<>;
  using tensor_type = meld::tensor<T>;

  mlp(const std::vector<index_t>& widths, std::uint64_t seed, activation act = activation::tanh)
      : act_(act), running_mean_(meld::shape_t{widths.front()}) {
    meld::rng gen(seed);
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
      const index_t in = widths[l], out = widths[l + 1];
      const T bound = T(1) / std::sqrt(static_cast<T>(in));
      layer ly;
      ly.w = gen.uniform<T>({out, in}, -bound, bound);
      ly.b = gen.uniform<T>({out}, -bound, bound);
      ly.dw = tensor_type({out, in});
      ly.db = tensor_type({out});
      layers_.push_back(std::move(ly));
    }
  }

  tensor_type forward(const tensor_type& x) {
    if (training_) running_mean_ = T(0.9) * running_mean_ + T(0.1) * meld::mean(x, 0);
    acts_.clear();
    acts_.emplace_back(x);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      // x W^T with W^T made contiguous first: the GEMM's fast path wants row-major operands.
      const tensor_type wt = layers_[l].w.transpose();
      tensor_type z = meld::matmul(acts_.back(), wt) + layers_[l].b;
      if (l + 1 < layers_.size()) {
        if (act_ == activation::tanh)
          z = meld::tanh(z);
        else
          z = meld::relu(z);
      }
      acts_.push_back(std::move(z));
    }
    return tensor_type(acts_.back());
  }

  tensor_type backward(const tensor_type& g) {
    auto none = [](tensor_type&) {};
    return backward_impl(g, none);
  }
  template <class Hook>
  requires Hooks tensor_type backward(const tensor_type& g, Hook& hook) {
    return backward_impl(g, hook);
  }

  template <class F>
  void visit_parameters(F&& f) {
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      f(std::to_string(l) + ".weight", layers_[l].w, layers_[l].dw);
      f(std::to_string(l) + ".bias", layers_[l].b, layers_[l].db);
    }
  }
  template <class F>
  void visit_buffers(F&& f) {
    f("input_mean", running_mean_);
  }
  void zero_grad() {
    for (auto& l : layers_) {
      l.dw = T(0);
      l.db = T(0);
    }
  }
  void train(bool on) { training_ = on; }

  // Whether backward computes the gradient w.r.t. the input (off: it returns the gradient
  // w.r.t. the first layer's output, saving that product when nothing needs it).
  bool input_gradient = true;

  mlp replica() const {
    mlp m(*this, copy_tag{});
    return m;
  }

  mlp(mlp&&) noexcept = default;
  mlp& operator=(mlp&&) noexcept = default;

 private:
  struct copy_tag {};
  struct layer {
    tensor_type w, b, dw, db;
  };
  mlp(const mlp& o, copy_tag)
      : input_gradient(o.input_gradient),
        act_(o.act_),
        training_(o.training_),
        running_mean_(o.running_mean_) {
    for (const auto& l : o.layers_)
      layers_.push_back({tensor_type(l.w), tensor_type(l.b), tensor_type(l.dw), tensor_type(l.db)});
  }

  template <class Hook>
  tensor_type backward_impl(const tensor_type& g, Hook& hook) {
    tensor_type grad(g);
    for (std::size_t l = layers_.size(); l-- > 0;) {
      if (l + 1 < layers_.size()) {
        const tensor_type& h = acts_[l + 1];
        if (act_ == activation::tanh)
          grad = grad * (T(1) - meld::square(h));
        else
          grad = grad * (h > T(0));
      }
      meld::gemm(T(1), grad.transpose(), acts_[l], T(1), layers_[l].dw);
      layers_[l].db += meld::sum(grad, 0);
      hook(layers_[l].dw);
      hook(layers_[l].db);
      if (l > 0 || input_gradient) grad = meld::matmul(grad, layers_[l].w);
    }
    return grad;
  }

  activation act_;
  bool training_ = true;
  std::vector<layer> layers_;
  std::vector<tensor_type> acts_;
  tensor_type running_mean_;
};

// Mean over the batch of half the squared error: loss = sum((y - t)^2) / (2 n).
struct mse {
  template <class T, class B>
  double operator()(const meld::tensor<T, B>& y, const meld::tensor<T, B>& t,
                    meld::tensor<T, B>& grad) const {
    const T n = static_cast<T>(y.shape()[0]);
    grad = (y - t) / n;
    return static_cast<double>(meld::sum(meld::square(y - t))) / (2.0 * static_cast<double>(n));
  }
};

// Mean softmax cross-entropy against class indices.
struct cross_entropy {
  template <class T, class B>
  double operator()(const meld::tensor<T, B>& z, const meld::tensor<std::int64_t, B>& t,
                    meld::tensor<T, B>& grad) const {
    const index_t n = z.shape()[0], c = z.shape()[1];
    meld::tensor<T, B> p = meld::exp(z - meld::max(z, 1, true));
    p /= meld::sum(p, 1, true);
    double loss = 0;
    for (index_t i = 0; i < n; ++i) {
      const index_t k = t(i);
      loss -= std::log(static_cast<double>(p(i, k)));
      p(i, k) -= T(1);
    }
    (void)c;
    grad = p / static_cast<T>(n);
    return loss / static_cast<double>(n);
  }
};

// Copies of every parameter's gradient, in visit order.
template <class M>
std::vector<meld::tensor<typename M::value_type>> gradients(M& m) {
  std::vector<meld::tensor<typename M::value_type>> out;
  m.visit_parameters([&](std::string_view, auto&, auto& g) { out.emplace_back(g); });
  return out;
}
template <class M>
std::vector<meld::tensor<typename M::value_type>> parameters(M& m) {
  std::vector<meld::tensor<typename M::value_type>> out;
  m.visit_parameters([&](std::string_view, auto& p, auto&) { out.emplace_back(p); });
  return out;
}

// Plain SGD on a model (the optimizer of these tests): p -= lr * g.
template <class M>
void sgd(M& m, typename M::value_type lr) {
  m.visit_parameters([&](std::string_view, auto& p, auto& g) { p -= lr * g; });
}

}  // namespace toy
