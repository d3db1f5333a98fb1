// `nns help`: the commands, their options, the stages --emit names, the
// environment and the exit codes.
#pragma once

#include <string>

namespace nns::driver {

const char* help_text();

// One command's help (`nns CMD --help`, `nns help CMD`): its usage, what it
// does, its options one per line and an example; "" for an unknown command.
std::string command_help(const std::string& command);

}  // namespace nns::driver
