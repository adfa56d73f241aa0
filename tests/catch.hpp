// One include for Catch2 2.x (Debian 12) and Catch2 3.x (newer systems).
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
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
