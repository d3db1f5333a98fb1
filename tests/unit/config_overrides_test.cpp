// --set KEY=VALUE (semantics/config_overrides.h): parsing, typing by the
// entry's value in the file, and the nearest-name message.
#include <catch2/catch.hpp>

#include "semantics/config_overrides.h"

using namespace nns::sema;

TEST_CASE("--set values take the type of the entry they replace", "[config]") {
  std::vector<ConfigOverride> o;
  REQUIRE(parse_config_overrides({"a=3", "b=2.5", "c=true", "d=hello=x"}, o).empty());
  REQUIRE(o.size() == 4);
  CHECK(o[3].key == "d");
  CHECK(o[3].text == "hello=x");
  Value out;
  std::string err;
  REQUIRE(typed_override(Value(int64_t{1}), o[0], out, err));
  CHECK(out.as<int64_t>() == 3);
  REQUIRE(typed_override(Value(1.0), o[0], out, err));  // an int for a float entry
  CHECK(out.as<double>() == 3.0);
  REQUIRE(typed_override(Value(false), o[2], out, err));
  CHECK(out.as<bool>());
  REQUIRE(typed_override(Value(std::string("x")), o[3], out, err));
  CHECK(out.as<std::string>() == "hello=x");
  CHECK_FALSE(typed_override(Value(int64_t{1}), o[1], out, err));
  CHECK(err == "--set b=2.5: 'b' is an int");
  CHECK_FALSE(typed_override(Value(true), o[0], out, err));
  CHECK(err == "--set a=3: 'a' is a bool (true or false)");
  CHECK_FALSE(parse_config_overrides({"=1"}, o).empty());
}

TEST_CASE("an unknown --set key names the nearest entry when one is close", "[config]") {
  std::vector<std::string> entries{"batch", "seq", "micro_batches", "steps"};
  CHECK(unknown_override_message("micro_batch", entries, "tiny") == "--set micro_batch: config 'tiny' has no entry 'micro_batch'; did you mean 'micro_batches'?");
  CHECK(unknown_override_message("btach", entries, "tiny").find("did you mean 'batch'?") != std::string::npos);
  CHECK(unknown_override_message("learning_rate", entries, "tiny").find("did you mean") == std::string::npos);
}
