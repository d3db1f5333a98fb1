// `nns help`: the commands, their options, the stages --emit names, the
// environment and the exit codes.
#pragma once

#include <string>

namespace nns::driver {

const char* help_text();
// The device profiles --device and --device-memory take (read from the
// profiles directory, so a new profile file is listed without a rebuild).
std::string profiles_help();

// One command's help (`nns CMD --help`, `nns help CMD`): its usage, what it
// does, its options one per line and an example; "" for an unknown command.
std::string command_help(const std::string& command);

}  // namespace nns::driver
