// frontend/suggest.h: the nearest known name for a misspelt one.
#include <catch2/catch.hpp>

#include "frontend/suggest.h"

using nns::front::did_you_mean;
using nns::front::edit_distance;
using nns::front::nearest_name;

TEST_CASE("edit_distance counts a swap of neighbours as one edit", "[suggest]") {
  CHECK(edit_distance("gelu", "gelu") == 0);
  CHECK(edit_distance("gleu", "gelu") == 1);
  CHECK(edit_distance("tinny", "tiny") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("nearest_name: plausible misspellings only", "[suggest]") {
  const std::vector<std::string> ops = {"gelu", "relu", "linear", "layer_norm", "softmax"};
  CHECK(nearest_name("gleu", ops) == "gelu");
  CHECK(nearest_name("lienar", ops) == "linear");
  CHECK(nearest_name("softmx", ops) == "softmax");
  CHECK(nearest_name("attention", ops).empty());  // nothing near
  CHECK(nearest_name("gelu", ops).empty());       // known: not a misspelling
  CHECK(nearest_name("x", {"y", "z"}).empty());   // one letter: never
  CHECK(did_you_mean("--step", {"--steps", "--seed"}) == " (did you mean '--steps'?)");
  CHECK(did_you_mean("--xyz", {"--steps", "--seed"}).empty());
}
