// Entry point of nns_comm_tests: collectives over 2-4 forked CPU ranks
// checked against locally computed sums, sub-groups, send/recv, timeouts,
// dead ranks and the launcher's stop-the-others policy.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
