// `nns help`: the commands, their options, the stages --emit names, the
// environment and the exit codes.
#pragma once

#include <string>

namespace nns::driver {

const char* help_text();
// The device profiles --device and --device-memory take (read from the
// profiles directory, so a new profile file is listed without a rebuild).
std::string profiles_help();

}  // namespace nns::driver
