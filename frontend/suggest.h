// "Did you mean": the nearest of a set of known names to one that was not
// found, for diagnostics about misspelt flags, configs, plans, ops, layers
// and keywords.
#pragma once

#include <string>
#include <vector>

namespace nns::front {

// Insertions, deletions and substitutions that turn a into b.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `name`, if it is near enough to be a plausible
// misspelling (at most a third of the name's length, at least one edit, and
// unambiguous: the first of equally near candidates); "" otherwise.
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" with nearest_name's answer, or "".
std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace nns::front
