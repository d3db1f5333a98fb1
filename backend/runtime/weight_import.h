// Checkpoints written in another framework's layout (Hugging Face's GPT-2 or
// Llama names, Conv1D weights stored [in, out], q/k/v fused in one tensor),
// read through a `weights` map of the model's file (semantics/weight_map.h)
// into the model's own names, and written back by `nns ckpt export`.
//
// Reading is lazy: only headers are read when a checkpoint is opened, and
// each tensor is read, converted to f32 (from F32, F16, BF16 or F64) and cut
// when its entry asks for it, so a sharded checkpoint is never held whole.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/runtime/safetensors.h"
#include "frontend/source.h"
#include "semantics/weight_map.h"

namespace nns::backend {

// One checkpoint in Hugging Face's layout: a .safetensors file, a sharded
// checkpoint's index (model.safetensors.index.json, whose "weight_map" names
// each tensor's file), or a folder holding either (the index preferred).
class ExternalCheckpoint {
 public:
  // Throws SafetensorsError naming the file and what is wrong.
  explicit ExternalCheckpoint(const std::string& path);
  const std::string& path() const { return path_; }
  int files() const { return static_cast<int>(headers_.size()); }
  std::vector<std::string> names() const;  // every tensor, sorted
  const StEntry* find(const std::string& name) const;
  // The tensor as f32 (its dtype converted exactly: F16, BF16 and F32 are
  // exact in f32; F64 is rounded to nearest).
  std::vector<float> read_f32(const std::string& name) const;

 private:
  std::string path_;
  std::vector<SafetensorsHeader> headers_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // name -> (file, entry)
};

// A problem that one entry of the map (or the map as a whole) is the place
// to fix: the driver prints it located at `loc`, with the source line.
struct WeightMapError : SafetensorsError {
  WeightMapError(front::SourceLoc l, const std::string& what) : SafetensorsError(what), loc(l) {}
  front::SourceLoc loc;
};

struct ModelParam {
  std::string name;
  std::vector<int64_t> shape;
  bool buffer = false;  // a buffer (rotary tables) a weights file may leave out
};

struct ImportedWeights {
  SafetensorsFile tensors;           // the model's names, F32, what --init loads
  std::vector<std::string> kept;     // parameters given no tensor (--init-partial keeps their initializers)
  std::vector<std::string> ignored;  // source tensors the map's ignore() patterns leave unread
};

// The map's takes whose parameter the model does not have, each with its
// message ("the model has no parameter 'x' (did you mean 'y'?)"): what
// `nns check` reports without a checkpoint, and import_weights first.
std::vector<WeightMapError> unknown_parameters(const sema::WeightMapSpec& map, const std::vector<ModelParam>& params);

// Every parameter the map takes, from `ckpt`: sliced, transposed and checked
// against the model's shape. A parameter no entry gives is an error unless
// `partial` (then listed in `kept`), as is a source tensor no entry reads
// and no ignore() pattern names. Throws WeightMapError (located) or
// SafetensorsError.
ImportedWeights import_weights(const sema::WeightMapSpec& map, const ExternalCheckpoint& ckpt,
                               const std::vector<ModelParam>& params, bool partial);

// `nns ckpt export`: the parameters of `f` (an nns checkpoint or weights
// file, the model's names) in the map's layout, every take inverted: sliced
// sources assembled from their pieces (which must tile them), transposes
// undone. `notes` gets what the export could not make as the original was
// (a source cut by the map, written with the model's extent only).
std::vector<StTensor> export_weights(const sema::WeightMapSpec& map, const SafetensorsFile& f, const std::string& path,
                                     std::vector<std::string>& notes);

// '*' matches any run of characters, '?' one; everything else itself.
bool wildcard_match(const std::string& pattern, const std::string& text);

}  // namespace nns::backend
