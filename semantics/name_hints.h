// What to suggest for an undefined name: a close name in scope ("did you
// mean"), a config entry (`cfg.x`), or the stdlib module that defines it
// when its import is missing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "semantics/value.h"

namespace nns::sema {

// " (did you mean ...?)" / " (defined in stdlib module 'nn': add import \"nn\")",
// or "" when nothing is near. `stdlib_dirs` are searched for `NAME.nns`
// modules whose top-level model, fn or op declarations include `name`.
// The stdlib's module names (the .nns files in `stdlib_dirs`, without the
// extension), for "did you mean" on an import that finds nothing.
std::vector<std::string> stdlib_modules(const std::vector<std::string>& stdlib_dirs);

std::string undefined_name_hint(const std::string& name, Env& env, const std::vector<std::string>& stdlib_dirs);

}  // namespace nns::sema
