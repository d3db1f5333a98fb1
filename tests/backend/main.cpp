// Entry point of nns_backend_tests: the CPU kernel conformance table
// (fast vs ref), gradient checks of the reference kernels, and dropout
// invariance.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
