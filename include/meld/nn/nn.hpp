// Everything for training: layers, the sequential container, losses, initialization,
// optimizers and checkpoints.
#pragma once

#include "activations.hpp"
#include "batch_norm.hpp"
#include "checkpoint.hpp"
#include "conv2d.hpp"
#include "cross_entropy.hpp"
#include "dropout.hpp"
#include "flatten.hpp"
#include "init.hpp"
#include "layer.hpp"
#include "linear.hpp"
#include "model.hpp"
#include "optim/adam.hpp"
#include "optim/optimizer.hpp"
#include "optim/sgd.hpp"
#include "pooling.hpp"
#include "require_model.hpp"
#include "sequential.hpp"
