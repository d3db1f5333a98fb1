// Unit tests for semantics/builtin_args.h: the op-name patterns that
// select() and the constraint tables share.
#include <catch2/catch.hpp>

#include "semantics/builtin_args.h"

using nns::sema::builtin_args::glob;

TEST_CASE("builtin args: '*' spans any run of characters, dots included", "[builtin_args]") {
  CHECK(glob("*", ""));
  CHECK(glob("*", "blocks.3.attn.linear#0"));
  CHECK(glob("blocks.*.attn.*", "blocks.3.attn.linear#0"));
  CHECK(glob("*linear*", "blocks.3.mlp.linear#1"));
  CHECK_FALSE(glob("blocks.*.mlp.*", "blocks.3.attn.linear#0"));
  CHECK(glob("a**b", "ab"));
}

TEST_CASE("builtin args: '?' is one character, anything else itself", "[builtin_args]") {
  CHECK(glob("linear#?", "linear#0"));
  CHECK_FALSE(glob("linear#?", "linear#10"));
  CHECK_FALSE(glob("?", ""));
  CHECK(glob("", ""));
  CHECK_FALSE(glob("", "x"));
  CHECK_FALSE(glob("linear", "linear#0"));  // a pattern matches the whole name
}
