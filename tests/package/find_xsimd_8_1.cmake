# What meld used to ask: find_package(xsimd 8.1). Run with cmake -Dxsimd_DIR=... -P.
find_package(xsimd 8.1 REQUIRED CONFIG)
