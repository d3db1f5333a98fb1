#include "frontend/suggest.h"

#include <algorithm>

namespace nns::front {

size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: a swap of two neighbours ("gleu" for "gelu")
  // counts as one edit, as a typist makes it.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates) {
  // A third of the name, and at least 1 (2 for names of 6 or more):
  // "gleu" -> "gelu", "tinny" -> "tiny", "--step" -> "--steps", but not
  // "x" -> "y" (a one-letter name is never a misspelling of another).
  const size_t limit = std::max<size_t>(name.size() >= 6 ? 2 : 1, name.size() / 3);
  if (name.size() < 2) return "";
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    if (c == name) return "";
    size_t d = edit_distance(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string n = nearest_name(name, candidates);
  return n.empty() ? "" : " (did you mean '" + n + "'?)";
}

}  // namespace nns::front
