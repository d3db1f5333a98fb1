// Dimop annotations: nnScaler's per-operator dimension language, accepted
// verbatim ("m k+, k+ n -> m n"). This module parses an annotation string,
// normalises it by nnScaler's rules, binds it against concrete input shapes
// (expanding '*', solving identifier sizes, inferring output shapes) and
// lists the op's transform space: every legal way op-trans may partition it.
//
// Grammar of an annotation (whitespace separates dims):
//   anno     := operands '->' operands
//   operands := operand (',' operand)*        (may be empty on the left)
//   operand  := '?' | dim*                    ('?' = non-tensor value)
//   dim      := ident reduce? | number | '*' | '?' | '(' ident reduce? (ident reduce?)* ')'
//   reduce   := '' (spatial) | '+' (partial sum) | '^' (frozen)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nns::sema {

// How a dimension behaves under partitioning.
enum class Reduce {
  Spatial,  // ''  : split in inputs and outputs alike
  Sum,      // '+' : splitting yields partial-sum outputs
  Frozen,   // '^' : cannot be split
};

// One identifier inside a dimension (a plain dim has exactly one; a hidden
// dim "(h t)" has several whose sizes multiply to the tensor dim).
struct DimId {
  std::string name;      // identifier, or decimal digits for a numeric dim, or "*0".. after expansion
  Reduce reduce = Reduce::Spatial;
  bool numeric = false;  // "1", "3": a literal size, always Frozen
};

// One tensor dimension: an identifier or a bracketed group of them.
struct DimAnno {
  std::vector<DimId> ids;  // size 1 unless bracketed
  bool bracketed = false;
  bool star = false;       // '*' before expansion (ids empty)
  bool unknown = false;    // '?' as a dimension: replicate-only, any size
};

// One operand (input or output) of the op.
struct OperandAnno {
  bool non_tensor = false;      // '?' operand: not a tensor (an int, a list...)
  std::vector<DimAnno> dims;    // in tensor order
};

struct OpAnno {
  std::vector<OperandAnno> inputs;
  std::vector<OperandAnno> outputs;
  // Canonical text as nnScaler prints it: every identifier with its suffix
  // at every occurrence, numbers with '^' ("a b, (b n^) c^ -> a (1^ b c^)").
  std::string to_string() const;
};

// A parse or normalisation error; `column` is the 0-based offset into the
// annotation text where the problem starts (so callers can put a caret under
// it inside the string literal of a .nns file). normalize() on a built
// OpAnno and bind() have no user text: their columns point into the
// canonical text, anno.to_string().
struct DimopError {
  std::string message;
  size_t column = 0;
};

// Parse without normalising. Throws DimopError.
OpAnno parse_annotation(std::string_view text);

// Apply nnScaler's normalisation rules (throws DimopError):
//  - every identifier has one reduce kind everywhere it is written
//    ("m k+, k n -> m n" is an error naming k);
//  - identifiers after the leading one of a bracket (leading '1's skipped:
//    in "(1 b c)" b leads) become Frozen, at every occurrence;
//  - numeric dims (with or without a suffix: "8^") and '?' dims are Frozen;
//  - '*' may appear at most once per operand, in an output only if some
//    input has one, and an input's '*' must reach an output;
//  - '?' dims appear only in inputs (an output's size must be known).
// A spatial identifier that no output has is accepted (splitting it makes
// the outputs partial sums), and so is an identifier in two dims of one
// operand (it is then left out of the transform space): docs/language.md
// lists where nns differs from nnScaler.
OpAnno normalize(OpAnno anno);

// Parse + normalise in one call.
OpAnno parse_normalized(std::string_view text);

// What an op's inputs look like at a call site.
struct InputShape {
  bool is_tensor = true;
  std::vector<int64_t> shape;  // empty for scalars and non-tensors
};

// The annotation bound to concrete inputs.
struct BoundAnno {
  OpAnno anno;                              // '*' expanded into "*0", "*1", ...
  std::map<std::string, int64_t> sizes;     // every identifier's size
  std::vector<std::vector<int64_t>> output_shapes;  // per output ({} for '?')
};

// Bind one normalised annotation. `given` holds sizes supplied by the call
// (a hidden-dim identifier gets its size from the same-named argument).
// Throws DimopError on a rank mismatch, an inconsistent size, more than one
// unknown identifier inside a bracket, an indivisible bracket, or an output
// identifier whose size cannot be determined.
BoundAnno bind(const OpAnno& anno, const std::vector<InputShape>& inputs,
               const std::map<std::string, int64_t>& given = {});

// Several candidate annotations: the first whose operand count and ranks fit
// the inputs wins (nnScaler's rule); if none fits, the error of the first
// candidate that matched the rank pattern (or of the first candidate) is thrown.
BoundAnno bind_first(const std::vector<OpAnno>& candidates,
                     const std::vector<InputShape>& inputs,
                     const std::map<std::string, int64_t>& given = {});

// What one partition choice does to one operand.
struct PartitionEffect {
  enum Kind { Split, Replicated, PartialSum, NotTensor } kind = Replicated;
  int dim = -1;  // tensor dim that is split (Split only)
};

// One legal op-trans choice.
struct TransformChoice {
  enum Kind { Dim, Value } kind = Dim;
  std::string id;            // identifier being split (Dim only)
  Reduce reduce = Reduce::Spatial;
  int64_t size = 0;          // identifier size (Dim only); num must divide it
  std::vector<PartitionEffect> inputs, outputs;
  // e.g. "k+ (size 64): in0 split dim 1, in1 split dim 0, out0 partial-sum";
  // value split: "value: in0 partial-sum, in1 replicated, out0 partial-sum".
  std::string describe() const;
};

// Every identifier that may be split (not Frozen, not numeric, first in its
// bracket), in order of first appearance, plus a value split when
// `allow_value_split` (ops linear in their inputs). The value choice comes
// last: the first tensor input PartialSum, other inputs Replicated (or
// NotTensor), every tensor output PartialSum.
std::vector<TransformChoice> transform_space(const BoundAnno& bound, bool allow_value_split = false);
// The split of identifier `id` that transform_space lists, or nullopt when
// it lists none, without building the whole space.
std::optional<TransformChoice> transform_choice(const BoundAnno& bound, const std::string& id);

// The choice that splits input `input_index` along tensor dim `dim`
// (nnScaler's idx/dim addressing), or nullopt if that dim is not splittable.
std::optional<TransformChoice> choice_for(const BoundAnno& bound, int input_index, int dim);

const char* reduce_suffix(Reduce r);  // "", "+", "^"

// Input shapes that fit a normalised annotation, every identifier given a
// placeholder size of 2 and '*' one dim (dimop_shapes.cpp): lets
// `nns dimop` list a transform space when the user gives no shapes. A
// bracket whose sizes multiply past 64 bits gets INT64_MAX (bind() refuses it).
std::vector<InputShape> placeholder_shapes(const OpAnno& anno);

}  // namespace nns::sema
