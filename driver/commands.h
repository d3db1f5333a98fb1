// The commands of `nns` (see driver/help.cpp). check and run are option
// handling around the pipeline (driver/pipeline.h); each returns the exit
// code.
#pragma once

#include "driver/args.h"

namespace nns::driver {

int cmd_check(const Args& a);  // nns check FILE ...: up to the check stage, then a summary
int cmd_run(const Args& a);    // nns run FILE ...: up to the run stage
int cmd_ckpt(const Args& a);   // nns ckpt merge DIR -o FILE
int cmd_dimop(const Args& a);  // nns dimop 'ANNOTATION' [--shapes ...]
int cmd_repl(const Args& a);   // nns repl [FILE]
int cmd_verify_op(const Args& a);  // nns verify-op FILE OP (driver/verify_op.cpp)

}  // namespace nns::driver
