// The backward pass: walks the recorded graph from a root in reverse topological order, so that
// each node runs once, after every node that uses its output has added to that output's gradient.
// A leaf's gradient is final once every node that reads it has run: on_leaf_ready(leaf) is called
// then (data_parallel's gradient buckets start their allreduce there, overlapping the rest of the
// backward pass). The graph is freed as it is walked unless retain_graph.
#pragma once

#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "node.hpp"
#include "variable.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

// The interior states reachable from root, every one after all the states that read it (root
// first), and for each leaf that requires a gradient the number of distinct nodes that read it.
template <class T, class B>
void topological_order(const state_ptr<T, B>& root, std::vector<state_ptr<T, B>>& order,
                       std::unordered_map<variable_state<T, B>*, int>& leaf_readers) {
  using S = variable_state<T, B>;
  std::unordered_set<S*> seen;
  struct frame {
    state_ptr<T, B> s;
    std::size_t next;
  };
  std::vector<frame> stack;
  std::vector<state_ptr<T, B>> post;
  auto visit = [&](const state_ptr<T, B>& s) {
    if (s->grad_fn->released())
      throw std::logic_error(
          "autograd: backward through a graph that was already freed by a backward pass through " +
          s->grad_fn->name() + " (pass backward_options{.retain_graph = true} to the first)");
    seen.insert(s.get());
    stack.push_back({s, 0});
  };
  visit(root);
  while (!stack.empty()) {
    frame& f = stack.back();
    const auto& in = f.s->grad_fn->inputs();
    if (f.next == in.size()) {
      post.push_back(f.s);
      stack.pop_back();
      continue;
    }
    state_ptr<T, B> child = in[f.next++];
    if (!child->requires_grad || seen.count(child.get())) continue;
    if (child->is_leaf())
      seen.insert(child.get());
    else
      visit(child);
  }
  order.assign(post.rbegin(), post.rend());
  for (const auto& s : order) {
    std::unordered_set<S*> distinct;
    for (const auto& in : s->grad_fn->inputs())
      if (in->is_leaf() && in->requires_grad && distinct.insert(in.get()).second)
        ++leaf_readers[in.get()];
  }
}

}  // namespace detail

/// Back-propagates `grad` (the gradient of a scalar with respect to root's value) through the
/// graph that computed root, adding into the grad() of every leaf that requires one, and calls
/// on_leaf_ready(leaf_state) for each such leaf once its gradient is final.
template <class T, class B, class OnLeafReady>
void run_backward(const state_ptr<T, B>& root, tensor<T, B> grad, bool retain_graph,
                  OnLeafReady&& on_leaf_ready) {
  using S = variable_state<T, B>;
  if (!root) throw std::logic_error("autograd: backward of a null variable");
  if (!root->requires_grad)
    throw std::logic_error(
        "autograd: backward of a variable that does not require a gradient (no leaf it was "
        "computed from requires one, or it was computed under no_grad)");
  if (root->is_leaf()) {
    accumulate(*root, std::move(grad));
    on_leaf_ready(*root);
    return;
  }
  // (Shared handles: releasing a node may drop the last other reference to a state.)
  std::vector<state_ptr<T, B>> order;
  std::unordered_map<S*, int> leaf_readers;
  detail::topological_order(root, order, leaf_readers);
  root->pending = std::move(grad);
  root->has_pending = true;
  try {
    for (const auto& s : order) {
      node<T, B>& fn = *s->grad_fn;
      if (s->has_pending) {
        fn.backward(s->pending);
        s->pending = tensor<T, B>();
        s->has_pending = false;
      }
      std::unordered_set<S*> distinct;
      for (const auto& in : fn.inputs())
        if (in->is_leaf() && in->requires_grad && distinct.insert(in.get()).second)
          if (--leaf_readers[in.get()] == 0) on_leaf_ready(*in);
      if (!retain_graph) fn.release();
    }
  } catch (...) {
    for (const auto& s : order) {  // no half-propagated gradients stay behind
      s->pending = tensor<T, B>();
      s->has_pending = false;
    }
    throw;
  }
}

/// @}

}  // namespace meld::autograd
