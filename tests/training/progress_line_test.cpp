// The live progress line's text (backend/runtime/progress_line.h).
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "backend/runtime/progress_line.h"

using namespace nns;

TEST_CASE("short_duration: seconds, minutes, hours", "[progress]") {
  CHECK(backend::short_duration(0.2) == "0s");
  CHECK(backend::short_duration(42.4) == "42s");
  CHECK(backend::short_duration(185) == "3m05s");
  CHECK(backend::short_duration(3720) == "1h02m");
  CHECK(backend::short_duration(-3) == "0s");
}

TEST_CASE("progress_text: step, percentage, loss, rate, ETA, peak", "[progress]") {
  CHECK(backend::progress_text(5, 20, 3.14159, 0.001, 51234, "tokens", 75, "5.2 MiB") ==
        "step 5/20 ( 25%)  loss 3.1416  lr 0.001  51.2k tokens/s  ETA 1m15s  peak 5.2 MiB");
  // The first step: no pace yet.
  CHECK(backend::progress_text(1, 4, 2, 0.1, 800, "samples", -1, "1 KiB").find("800 samples/s  ETA ?") !=
        std::string::npos);
  // A file is not a terminal.
  std::FILE* f = std::tmpfile();
  CHECK_FALSE(backend::wants_live_progress(f));
  std::fclose(f);
}
