// One include for Catch2 2.x (Debian 12) and Catch2 3.x (newer systems). The version is the one
// CMake found (MELD_CATCH2_FOUND_MAJOR): a machine can have the other's headers on its include
// path too, and the headers must match the library that is linked.
#pragma once

#if defined(MELD_CATCH2_FOUND_MAJOR) ? MELD_CATCH2_FOUND_MAJOR >= 3 \
                                     : __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
#define MELD_CATCH_MAJOR 3
#else
#include <catch2/catch.hpp>
#define MELD_CATCH_MAJOR 2
#endif
