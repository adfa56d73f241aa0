// The former name of <meld/essentials.hpp>, kept for one release: include that instead ("core"
// is the name of the lowest folder, core/, which this umbrella includes with the layers above it).
#pragma once

#include "essentials.hpp"
