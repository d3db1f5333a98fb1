// What the REPL does with a line before the interpreter sees it: whether
// the input typed so far is complete (every bracket and block closed, so a
// continuation prompt is due otherwise) and whether a line is a REPL
// command (`ops`, `show OP`, `run 10 --verify`, ...) rather than .nns text.
#pragma once

#include <string>
#include <vector>

namespace nns::repl {

// False while a '(' '[' or '{' opened outside strings and comments is not
// closed yet. Extra closers make the input "complete": the parser then
// reports them. A string cannot span lines, so an unclosed quote does not
// wait for more input either.
bool input_complete(const std::string& text);

struct Command {
  std::string name;               // canonical: "exit" -> "quit"
  std::vector<std::string> args;  // words; "double quotes" group
};

// The REPL's commands, in help order.
const std::vector<std::string>& command_names();

// True when `line` is a command: its first word names one (optionally
// written ':name') and what follows does not continue a .nns statement —
// `ops = select("*")` and `run(3)` stay .nns, `ops *.linear#*` and
// `run 5 --verify` are commands. A leading ':' always means a command.
bool parse_command(const std::string& line, Command& out);

}  // namespace nns::repl
