// Reverse-mode automatic differentiation over meld tensors and fused expressions: variables,
// the fused backward of elementwise expressions, reductions, matmul, views, softmax and losses,
// custom functions, gradcheck, linear and layer objects, and forward-only models that satisfy
// nn::model.
#pragma once

#include "convolution.hpp"
#include "derivatives.hpp"
#include "dropout.hpp"
#include "engine.hpp"
#include "function.hpp"
#include "fused.hpp"
#include "grad_mode.hpp"
#include "gradcheck.hpp"
#include "layers.hpp"
#include "linear.hpp"
#include "losses.hpp"
#include "matmul.hpp"
#include "module.hpp"
#include "normalization.hpp"
#include "pooling.hpp"
#include "reductions.hpp"
#include "softmax.hpp"
#include "variable.hpp"
#include "views.hpp"
