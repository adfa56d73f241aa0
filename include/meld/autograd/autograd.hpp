// Reverse-mode automatic differentiation over meld tensors and fused expressions: variables,
// the fused backward of elementwise expressions, reductions, matmul, views, softmax and losses,
// custom functions, gradcheck, and forward-only models that satisfy nn::model.
#pragma once

#include "derivatives.hpp"
#include "engine.hpp"
#include "function.hpp"
#include "fused.hpp"
#include "grad_mode.hpp"
#include "gradcheck.hpp"
#include "losses.hpp"
#include "matmul.hpp"
#include "module.hpp"
#include "reductions.hpp"
#include "softmax.hpp"
#include "variable.hpp"
#include "views.hpp"
