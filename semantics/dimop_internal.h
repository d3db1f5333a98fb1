// Internals shared by the files that implement dimop annotations (dimop.cpp:
// printing, lexing, parsing, normalisation; dimop_binding.cpp; dimop_transform.cpp).
// Nothing outside them includes it.
#pragma once

#include <string>
#include <vector>

#include "semantics/dimop.h"

namespace nns::sema::dimop_detail {

// ---- columns ----------------------------------------------------------------
// Where each operand, dim and identifier starts in some text. The parser
// records them for the user's text; render() records them for the canonical
// text, which is what errors point into when no user text is at hand
// (normalize() on a built OpAnno, bind()).

struct OperandCols {
  size_t col = 0;
  std::vector<size_t> dims;              // column of each dim
  std::vector<std::vector<size_t>> ids;  // column of each identifier of each dim
};

struct Columns {
  std::vector<OperandCols> inputs, outputs;
  const std::vector<OperandCols>& side(bool output) const { return output ? outputs : inputs; }
};

inline DimopError error_at(size_t column, std::string message) { return DimopError{std::move(message), column}; }

inline std::string operand_name(bool output, size_t index) {
  return (output ? "output " : "input ") + std::to_string(index);
}

// The identifier of a dim that a split of the dim splits: the first one,
// after any leading '1's ("(1 1 b c)": b), as nnScaler has it.
inline size_t leading_position(const DimAnno& d) {
  size_t k = 0;
  while (k + 1 < d.ids.size() && d.ids[k].numeric && d.ids[k].name == "1") ++k;
  return k;
}

// ---- printing (dimop.cpp) ---------------------------------------------------

// The canonical text of an annotation; with `cols`, where each part starts in it.
std::string render(const OpAnno& a, Columns* cols);
std::string operand_text(const OperandAnno& op);
std::string dim_text(const DimAnno& d);

// ---- identifier occurrences -------------------------------------------------

// Where one identifier occurrence sits: output side?, operand, dim, position in dim.
struct IdRef {
  bool output;
  size_t op, dim, pos;
  const DimId& id;
};

template <typename F>
void for_each_id(const OpAnno& a, F f) {
  for (bool output : {false, true}) {
    const std::vector<OperandAnno>& ops = output ? a.outputs : a.inputs;
    for (size_t o = 0; o < ops.size(); ++o)
      for (size_t d = 0; d < ops[o].dims.size(); ++d)
        for (size_t k = 0; k < ops[o].dims[d].ids.size(); ++k) f(IdRef{output, o, d, k, ops[o].dims[d].ids[k]});
  }
}

inline size_t col_of(const Columns& c, const IdRef& r) { return c.side(r.output)[r.op].ids[r.dim][r.pos]; }

}  // namespace nns::sema::dimop_detail
