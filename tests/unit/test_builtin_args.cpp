// Unit tests for semantics/builtin_args.h: the op-name patterns that
// select() and the constraint tables share.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

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

// The definition glob() implements, written as the recursion it replaced:
// '*' absorbs nothing or one more character.
static bool glob_by_definition(const char* p, const char* s) {
  if (!*p) return !*s;
  if (*p == '*') return glob_by_definition(p + 1, s) || (*s && glob_by_definition(p, s + 1));
  if (*s && (*p == '?' || *p == *s)) return glob_by_definition(p + 1, s + 1);
  return false;
}

TEST_CASE("builtin args: glob agrees with its definition on every short pattern and name", "[builtin_args]") {
  // Patterns over {a, b, *, ?} up to 5 characters against names over {a, b}
  // up to 6: backtracking to the last '*' must decide exactly as the
  // recursion does, including the cases where an earlier '*' would have to
  // give back characters ("*a*ab" against "aaab").
  const char pattern_chars[] = {'a', 'b', '*', '?'};
  const char name_chars[] = {'a', 'b'};
  std::vector<std::string> patterns{""}, names{""};
  for (size_t n = 0; n < patterns.size() && patterns[n].size() < 5; ++n)
    for (char c : pattern_chars) patterns.push_back(patterns[n] + c);
  for (size_t n = 0; n < names.size() && names[n].size() < 6; ++n)
    for (char c : name_chars) names.push_back(names[n] + c);
  size_t checked = 0, matched = 0;
  for (const std::string& p : patterns)
    for (const std::string& s : names) {
      bool want = glob_by_definition(p.c_str(), s.c_str());
      INFO("pattern '" << p << "' name '" << s << "'");
      REQUIRE(glob(p.c_str(), s.c_str()) == want);
      ++checked;
      matched += want;
    }
  CHECK(checked == patterns.size() * names.size());
  CHECK(matched > 0);
  CHECK(matched < checked);
}
