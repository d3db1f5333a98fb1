// What a `weights NAME { ... }` block says (docs/language.md, "Pretrained
// weights"): how the tensors of a checkpoint written in another layout
// (Hugging Face's GPT-2 or Llama names, say) become the model's parameters.
// The block runs once, like a plan body, and its builtins record entries:
//
//   take(param, source, slice = [axis, start, end], transpose = false)
//       parameter `param` (its qualified name, "blocks.0.attn.wq") is the
//       source tensor, cut to [start, end) along `axis` and then, if asked,
//       transposed (a 2-d tensor);
//   ignore(pattern)          source tensors matching the glob are read by
//                            no entry on purpose (GPT-2's causal-mask buffers);
//   optional_prefix(text)    a source name may also appear with this prefix
//                            (GPT2Model saves "h.0...", GPT2LMHeadModel
//                            "transformer.h.0...").
//
// The runtime side (backend/runtime/weight_import.h) reads a file or a
// sharded checkpoint through it, and `nns ckpt export` inverts it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frontend/source.h"

namespace nns::sema {

struct WeightTake {
  std::string param;   // the model's qualified parameter name
  std::string source;  // the tensor's name in the other layout
  int axis = -1;       // slice along this axis of the source; -1: the whole tensor
  int64_t start = 0, end = 0;
  bool transpose = false;  // of the (sliced) 2-d source
  front::SourceLoc loc;    // the take() call
};

struct WeightMapSpec {
  std::string name;
  front::SourceLoc loc;  // the block's name
  std::vector<WeightTake> takes;
  std::vector<std::string> ignored;   // glob patterns ('*' any run of characters)
  std::vector<std::string> prefixes;  // optional source-name prefixes
};

}  // namespace nns::sema
