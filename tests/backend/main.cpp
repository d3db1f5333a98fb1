// Entry point of nns_backend_tests: the op conformance table (tested
// backends vs the reference backend, through Backend::run_node), kernel
// coverage of the registry rows, gradient checks of the reference kernels,
// and dropout invariance.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
