// The primitive-op registry, semantic half: one row per primitive op with
// what the interpreter and planner need — how to annotate a call whose
// annotation depends on its arguments (reshape, permute, sum over a dim...),
// how many multiply-adds it costs, its output dtype. The stdlib declares
// each primitive in .nns (parameter names, defaults, fixed annotations) and
// the declaration binds to the row of the same name. Kernels are registered
// by the backend under the same names (no kernel type appears here).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "semantics/dimop.h"
#include "semantics/graph.h"

namespace nns::sema {

// A call as a registry row sees it: tensor operands (shape + dtype) and the
// op's non-tensor arguments by parameter name.
struct OpCall {
  std::vector<InputShape> inputs;
  std::vector<DType> dtypes;
  const std::map<std::string, Attr>* attrs = nullptr;

  int64_t int_attr(const std::string& name) const;
  std::vector<int64_t> ints_attr(const std::string& name) const;  // an int becomes a 1-list
  bool bool_attr(const std::string& name, bool fallback = false) const;
};

// An annotation computed for one call, with sizes of identifiers that the
// inputs alone do not determine (output-only dims, hidden-dim factors).
struct GeneratedAnno {
  std::string text;
  std::map<std::string, int64_t> sizes;
};

// A bad argument found by a row (an axis out of range...): the interpreter
// reports it at the call site.
struct OpArgError {
  std::string message;
};

struct OpRow {
  std::string name;
  // Null: the stdlib declaration's fixed annotations are used.
  GeneratedAnno (*annotate)(const OpCall&) = nullptr;
  // Multiply-adds of one forward call (0 for ops the Swin/GPT papers do not count).
  int64_t (*macs)(const BoundAnno&, const OpCall&) = nullptr;
  std::optional<DType> out_dtype;  // default: dtype of the first float input
  bool value_split = false;        // linear in its first input: trans(op, dim="value") is legal
};

const OpRow* find_op_row(const std::string& name);
std::vector<std::string> op_row_names();

}  // namespace nns::sema
