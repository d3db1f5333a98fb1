// Tab completion: what can follow the text before the cursor. Pure over
// the lists it is given (the session fills them from its interpreter and
// plan), so tests can check it without a terminal.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "repl/line_reader.h"

namespace nns::repl {

struct CompletionData {
  std::vector<std::string> commands;     // REPL commands
  std::vector<std::string> help_topics;  // help TOPIC: commands and plan primitives
  std::vector<std::string> op_names;     // qualified op names of the model
  std::vector<std::string> param_names;  // qualified parameter (and input) names
  std::vector<std::string> anno_ids;     // identifiers of the ops' dimop annotations
  std::vector<std::string> plan_names;
  std::vector<std::string> names;        // identifiers in scope at the prompt
  // Members of the value named by a dotted chain ("cfg", "l.Block"); empty if none.
  std::function<std::vector<std::string>(const std::string& chain)> members;
  // The annotation identifiers of the op(s) an expression names (the first
  // argument of the call whose dim = "..." is being typed); empty when it
  // names none or cannot be worked out without side effects.
  std::function<std::vector<std::string>(const std::string& expr)> op_anno_ids;
};

// `first_line`: the text is the start of an input (commands are possible).
Completion complete_input(const std::string& before_cursor, bool first_line, const CompletionData& data);

// The first argument of the call that is open at the end of `before` (the
// text from its '(' to the first comma at its level), trimmed; "" when no
// call is open. Strings and comments are skipped.
std::string open_call_first_arg(const std::string& before);

// Names that extend `typed`, one dotted level at a time ("blocks." offers
// "blocks.0.", "blocks.1."); a full name gets `suffix` appended.
std::vector<std::string> complete_dotted(const std::string& typed, const std::vector<std::string>& names, const std::string& suffix);

}  // namespace nns::repl
