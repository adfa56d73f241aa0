// The former name of <meld/distributed.hpp>, kept for one release: include that instead.
#pragma once

#include "distributed.hpp"
