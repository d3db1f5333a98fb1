// Pretrained weights in another framework's layout (driver/weights.cpp).
#pragma once

#include "driver/args.h"
#include "driver/pipeline.h"

namespace nns::driver {

// --init CKPT --init-map NAME: runs the file's `weights NAME` block and reads
// CKPT through it into p.init_weights (once, before any rank starts), and
// lists what --init-partial leaves at its initializers. Returns kExitOk, or
// the exit code after printing the (located) error. Nothing without a map.
int import_init_weights(Pipeline& p, const RunOptions& r);

// nns check: every `weights` block of the file runs, and each take must name
// a parameter of the model (a located error otherwise); no checkpoint is
// read. Returns kExitOk or kExitBadInput (errors printed).
int check_weight_maps(Pipeline& p);

// nns ckpt export CKPT FILE.nns --map NAME -o OUT: the checkpoint's weights
// written in the map's layout (every take inverted).
int cmd_ckpt_export(const Args& a);

}  // namespace nns::driver
