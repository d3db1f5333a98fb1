// Dimop transform space: the ways an op's bound annotation can be partitioned
// (a split of one identifier, or a value split) and what each does to every operand.
#include "semantics/dimop.h"

#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "semantics/dimop_internal.h"

namespace nns::sema {

using namespace dimop_detail;

namespace {

// `partial`: an output without the identifier holds partial sums ('+', or
// a spatial identifier that no output has).
PartitionEffect effect_on(const OperandAnno& op, const std::string& id, bool output, bool partial) {
  if (op.non_tensor) return {PartitionEffect::NotTensor, -1};
  for (size_t d = 0; d < op.dims.size(); ++d)
    if (!op.dims[d].ids.empty() && op.dims[d].ids[leading_position(op.dims[d])].name == id)
      return {PartitionEffect::Split, static_cast<int>(d)};
  if (output && partial) return {PartitionEffect::PartialSum, -1};
  return {PartitionEffect::Replicated, -1};
}

TransformChoice dim_choice(const BoundAnno& b, const DimId& id) {
  TransformChoice c;
  c.kind = TransformChoice::Dim;
  c.id = id.name;
  c.reduce = id.reduce;
  auto it = b.sizes.find(id.name);
  c.size = it == b.sizes.end() ? 0 : it->second;
  // A spatial identifier that no output has (nnScaler accepts "a b, b c ->
  // a c"): each part computes the outputs from its slice of b only, so they
  // are partial sums, as with '+'. (nnScaler marks them replicated instead,
  // which is right only when every part computes the whole output.)
  bool in_output = false;
  for (const OperandAnno& op : b.anno.outputs)
    for (const DimAnno& d : op.dims)
      for (const DimId& x : d.ids) in_output = in_output || x.name == id.name;
  bool partial = id.reduce == Reduce::Sum || (id.reduce == Reduce::Spatial && !in_output);
  for (const OperandAnno& op : b.anno.inputs) c.inputs.push_back(effect_on(op, id.name, false, partial));
  for (const OperandAnno& op : b.anno.outputs) c.outputs.push_back(effect_on(op, id.name, true, partial));
  return c;
}

// A value split of an op linear in its first tensor input (matmul, sum...):
// sub-op j gets the j-th partial-sum piece of that input and the whole of
// every other input, so every output is a partial sum. Represented as the
// first tensor input PartialSum, the other inputs Replicated, every tensor
// output PartialSum.
TransformChoice value_choice(const BoundAnno& b) {
  TransformChoice c;
  c.kind = TransformChoice::Value;
  bool first = true;
  for (const OperandAnno& op : b.anno.inputs) {
    if (op.non_tensor) {
      c.inputs.push_back({PartitionEffect::NotTensor, -1});
      continue;
    }
    c.inputs.push_back({first ? PartitionEffect::PartialSum : PartitionEffect::Replicated, -1});
    first = false;
  }
  for (const OperandAnno& op : b.anno.outputs)
    c.outputs.push_back({op.non_tensor ? PartitionEffect::NotTensor : PartitionEffect::PartialSum, -1});
  return c;
}

std::string effect_text(const PartitionEffect& e) {
  switch (e.kind) {
    case PartitionEffect::Split: return "split dim " + std::to_string(e.dim);
    case PartitionEffect::Replicated: return "replicated";
    case PartitionEffect::PartialSum: return "partial-sum";
    case PartitionEffect::NotTensor: return "non-tensor";
  }
  return "";
}

}  // namespace

std::vector<TransformChoice> transform_space(const BoundAnno& bound, bool allow_value_split) {
  std::vector<TransformChoice> out;
  // An identifier in two dims of one operand ("L 8^ (L 2)") has no split
  // nns can describe (one dim per operand); nnScaler splits both dims and
  // keeps the diagonal blocks, warning of data loss. Not splittable here.
  std::set<std::string> seen, repeated;
  std::set<std::tuple<bool, size_t, std::string>> in_operand;
  for_each_id(bound.anno, [&](const IdRef& r) {
    if (!r.id.numeric && !in_operand.insert({r.output, r.op, r.id.name}).second) repeated.insert(r.id.name);
  });
  for_each_id(bound.anno, [&](const IdRef& r) {
    const OperandAnno& op = (r.output ? bound.anno.outputs : bound.anno.inputs)[r.op];
    if (r.pos != leading_position(op.dims[r.dim]) || r.id.numeric || r.id.reduce == Reduce::Frozen ||
        repeated.count(r.id.name))
      return;
    if (seen.insert(r.id.name).second) out.push_back(dim_choice(bound, r.id));
  });
  if (allow_value_split) out.push_back(value_choice(bound));
  return out;
}

std::optional<TransformChoice> transform_choice(const BoundAnno& bound, const std::string& id) {
  // transform_space's filter for the identifier `id` alone: its first
  // occurrence at a bracket's leading position, not numeric nor frozen, in
  // no operand twice. (Plan evaluation asks for one identifier per trans();
  // building the whole space each time was most of evaluating a
  // million-sub-op plan.)
  bool repeated = false;
  const DimId* first = nullptr;
  for (bool output : {false, true}) {
    const std::vector<OperandAnno>& ops = output ? bound.anno.outputs : bound.anno.inputs;
    for (const OperandAnno& op : ops) {
      int count = 0;
      for (const DimAnno& d : op.dims)
        for (const DimId& x : d.ids) count += !x.numeric && x.name == id;
      repeated = repeated || count > 1;
    }
  }
  if (repeated) return std::nullopt;
  for_each_id(bound.anno, [&](const IdRef& r) {
    if (first || r.id.name != id) return;
    const OperandAnno& op = (r.output ? bound.anno.outputs : bound.anno.inputs)[r.op];
    if (r.pos == leading_position(op.dims[r.dim]) && !r.id.numeric && r.id.reduce != Reduce::Frozen) first = &r.id;
  });
  if (!first) return std::nullopt;
  return dim_choice(bound, *first);
}

std::optional<TransformChoice> choice_for(const BoundAnno& bound, int input_index, int dim) {
  if (input_index < 0 || input_index >= static_cast<int>(bound.anno.inputs.size())) return std::nullopt;
  const OperandAnno& op = bound.anno.inputs[input_index];
  if (dim < 0 || dim >= static_cast<int>(op.dims.size()) || op.dims[dim].ids.empty()) return std::nullopt;
  const DimId& id = op.dims[dim].ids[leading_position(op.dims[dim])];
  if (id.numeric || id.reduce == Reduce::Frozen) return std::nullopt;
  return transform_choice(bound, id.name);
}

std::string TransformChoice::describe() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < inputs.size(); ++i) parts.push_back("in" + std::to_string(i) + " " + effect_text(inputs[i]));
  for (size_t o = 0; o < outputs.size(); ++o)
    parts.push_back("out" + std::to_string(o) + " " + effect_text(outputs[o]));
  std::string s = kind == Value ? "value: " : id + reduce_suffix(reduce) + " (size " + std::to_string(size) + "): ";
  for (size_t p = 0; p < parts.size(); ++p) s += (p ? ", " : "") + parts[p];
  return s;
}

}  // namespace nns::sema
