// The plan search's progress on stderr (issue 26): a search that runs past
// the setup-notice threshold (2 s on a terminal, NNS_SETUP_NOTICE seconds
// when set, as driver/setup_notice.h) says what it is doing: the phase, the
// grid points done, the candidates costed and the best so far, at most once
// a second. On a terminal the line is redrawn in place; piped (only when
// NNS_SETUP_NOTICE asks) each update is a line of its own, so that logs
// and tests read whole lines. Silent otherwise: piped output stays the same
// whatever the machine's load.
#pragma once

#include <chrono>
#include <string>

#include "backend/planner/search.h"

namespace nns::driver {

class SearchProgressLine {
 public:
  explicit SearchProgressLine(std::string what);  // "searching plans for 8 x a100"
  ~SearchProgressLine();                          // ends a redrawn line; says how long a search that spoke took
  SearchProgressLine(const SearchProgressLine&) = delete;
  SearchProgressLine& operator=(const SearchProgressLine&) = delete;

  void update(const planner::SearchProgress& p);  // SearchOptions::progress

  // The update's text, without "nns: " and the line ending (tests).
  static std::string text(const std::string& what, const planner::SearchProgress& p);

 private:
  std::string what_;
  std::chrono::steady_clock::time_point start_, last_;
  double after_;  // seconds before the first update; < 0: never
  bool live_, spoke_ = false;
};

}  // namespace nns::driver
