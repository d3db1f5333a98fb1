// `--set KEY=VALUE` (nns run / check): overrides of the chosen config's
// entries. An override replaces the entry's value where the entry is
// evaluated, so later entries computed from it see the new value; the value
// is parsed as the type the file gives the entry (int, float, bool, string).
#pragma once

#include <string>
#include <vector>

#include "semantics/value.h"

namespace nns::sema {

struct ConfigOverride {
  std::string key, text;
  bool used = false;
};

// Splits each "KEY=VALUE"; "" on success, else what is wrong.
std::string parse_config_overrides(const std::vector<std::string>& sets, std::vector<ConfigOverride>& out);

// `o`'s value typed like `current` (the file's value of the entry) into
// `out`; false with `err` saying why (a value that does not parse as that
// type, or an entry of a type the command line cannot give).
bool typed_override(const Value& current, const ConfigOverride& o, Value& out, std::string& err);

// The message for an override naming no entry: the nearest entry name by
// edit distance, if one is close.
std::string unknown_override_message(const std::string& key, const std::vector<std::string>& entries, const std::string& config);

}  // namespace nns::sema
