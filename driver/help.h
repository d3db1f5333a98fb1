// `nns help`: the commands, their options, the stages --emit names, the
// environment and the exit codes.
#pragma once

namespace nns::driver {

const char* help_text();

}  // namespace nns::driver
