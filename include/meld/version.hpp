/// @file
/// meld's version. The single source of truth: CMake's project(VERSION), the package's
/// meldConfigVersion.cmake, meld.pc and the Conan recipe all read the three lines below.
#pragma once

/// \addtogroup core
/// @{

/// Major version: changes when the API changes incompatibly.
#define MELD_VERSION_MAJOR 0
/// Minor version: new features, compatible with earlier releases of the same major version.
#define MELD_VERSION_MINOR 1
/// Patch version: bug fixes only.
#define MELD_VERSION_PATCH 0

/// The version as one number, `major * 10000 + minor * 100 + patch` (0.1.0 is 100), for
/// `#if MELD_VERSION >= 100`.
#define MELD_VERSION (MELD_VERSION_MAJOR * 10000 + MELD_VERSION_MINOR * 100 + MELD_VERSION_PATCH)

/// @cond
#define MELD_DETAIL_STR_(x) #x
#define MELD_DETAIL_STR(x) MELD_DETAIL_STR_(x)
/// @endcond
/// The version as a string literal, "major.minor.patch".
#define MELD_VERSION_STRING           \
  MELD_DETAIL_STR(MELD_VERSION_MAJOR) \
  "." MELD_DETAIL_STR(MELD_VERSION_MINOR) "." MELD_DETAIL_STR(MELD_VERSION_PATCH)

/// @}
