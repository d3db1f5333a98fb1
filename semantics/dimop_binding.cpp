// Dimop binding: fitting an annotation to the inputs' ranks, expanding '*',
// and solving every identifier's size from the shapes (Binder).
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

std::string count_of(size_t n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }
std::string dims_word(size_t n) { return count_of(n, "dim"); }

size_t star_position(const OperandAnno& op) {
  for (size_t d = 0; d < op.dims.size(); ++d)
    if (op.dims[d].star) return d;
  return op.dims.size();
}

// Does the annotation fit the inputs' operand count, tensor-ness and ranks?
// Returns the problem, or nullopt and the number of dims '*' stands for
// (-1 when no input has '*').
// `cols` renders the annotation's columns; it is called only for an error,
// so that binding a fitting annotation (every op call) renders nothing.
template <class Cols>
std::optional<DimopError> check_fit(const OpAnno& a, const std::vector<InputShape>& in, Cols cols, int64_t& star) {
  star = -1;
  if (a.inputs.size() != in.size())
    return error_at(0, "annotation '" + render(a, nullptr) + "' expects " + count_of(a.inputs.size(), "input") +
                           " but the call has " + std::to_string(in.size()));
  size_t star_from = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const OperandAnno& op = a.inputs[i];
    auto head = [&] { return "input " + std::to_string(i); };
    if (op.non_tensor != !in[i].is_tensor)
      return error_at(cols().inputs[i].col,
                      op.non_tensor
                          ? head() + " is a tensor but the annotation has '?' (a non-tensor value) there"
                          : head() + " is not a tensor but annotation '" + operand_text(op) + "' expects one");
    if (op.non_tensor) continue;
    size_t rank = in[i].shape.size(), fixed = op.dims.size();
    bool has_star = star_position(op) < fixed;
    if (has_star) --fixed;
    auto prefix = [&] {
      return head() + " has rank " + std::to_string(rank) + " but annotation '" + operand_text(op) + "' expects ";
    };
    if (!has_star && rank != fixed) return error_at(cols().inputs[i].col, prefix() + dims_word(fixed));
    if (!has_star) continue;
    if (rank < fixed) return error_at(cols().inputs[i].col, prefix() + "at least " + dims_word(fixed));
    int64_t here = static_cast<int64_t>(rank - fixed);
    if (star < 0) {
      star = here;
      star_from = i;
    } else if (here != star) {
      return error_at(cols().inputs[i].col, prefix() + dims_word(fixed + star) + " ('*' covers " + dims_word(star) +
                                                ", fixed by input " + std::to_string(star_from) + ")");
    }
  }
  for (size_t o = 0; o < a.outputs.size(); ++o)
    if (star < 0 && star_position(a.outputs[o]) < a.outputs[o].dims.size())
      return error_at(cols().outputs[o].col, "'*' in output " + std::to_string(o) + " but no input has '*'");
  return std::nullopt;
}

// Replaces '*' by `count` spatial dims "*0".."*{count-1}"; `orig` maps each
// new dim back to its dim in the unexpanded operand (for error columns).
OperandAnno expand_star(const OperandAnno& op, int64_t count, std::vector<size_t>& orig) {
  OperandAnno out;
  out.non_tensor = op.non_tensor;
  for (size_t d = 0; d < op.dims.size(); ++d) {
    if (!op.dims[d].star) {
      out.dims.push_back(op.dims[d]);
      orig.push_back(d);
      continue;
    }
    for (int64_t k = 0; k < count; ++k) {
      DimAnno e;
      e.ids.push_back(DimId{"*" + std::to_string(k), Reduce::Spatial, false});
      out.dims.push_back(e);
      orig.push_back(d);
    }
  }
  return out;
}

// The lexer admits at most 18 digits, so this cannot overflow; a built
// OpAnno with a non-digit "numeric" name is rejected rather than misread.
int64_t literal(const DimId& id) {
  int64_t v = 0;
  for (char c : id.name) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || id.name.size() > 18)
      throw DimopError{"numeric dim '" + id.name + "' is not a number", 0};
    v = v * 10 + (c - '0');
  }
  return v;
}

// Solves every identifier's size for one (already fitting) annotation.
class Binder {
 public:
  Binder(const OpAnno& a, const std::vector<InputShape>& in, const std::map<std::string, int64_t>& given)
      : anno_(a), in_(in), given_(given) {}

  BoundAnno run() {
    int64_t star = -1;
    auto columns = [this]() -> const Columns& { return cols(); };
    if (auto err = check_fit(anno_, in_, columns, star)) throw *err;
    bound_.anno.inputs = expand_side(anno_.inputs, star, in_orig_);
    bound_.anno.outputs = expand_side(anno_.outputs, star, out_orig_);
    take_given();
    take_plain_dims();
    solve_brackets();
    compute_outputs();
    for (const auto& [name, k] : known_) bound_.sizes[name] = k.value;
    return std::move(bound_);
  }

 private:
  struct Known {
    int64_t value;
    // Where the size came from, for a conflict's message (phrase()).
    enum Source { Given, Input, Bracket } source = Given;
    size_t input = 0, dim = 0;
  };

  // "given as 64", "64 in input 0 dim 1", "16 from bracket (h d) of input 0 dim 2".
  std::string phrase(const Known& k) const {
    std::string v = std::to_string(k.value);
    if (k.source == Known::Given) return "given as " + v;
    if (k.source == Known::Input) return v + " in " + where(k.input, k.dim);
    return v + " from " + bracket_head(k.input, k.dim);
  }

  std::string bracket_head(size_t i, size_t d) const {
    return "bracket " + dim_text(bound_.anno.inputs[i].dims[d]) + " of " + where(i, d);
  }

  // The columns of the unexpanded annotation's canonical text, rendered
  // the first time an error needs one.
  const Columns& cols() const {
    if (!cols_) {
      cols_.emplace();
      render(anno_, &*cols_);
    }
    return *cols_;
  }

  std::vector<OperandAnno> expand_side(const std::vector<OperandAnno>& ops, int64_t star,
                                       std::vector<std::vector<size_t>>& orig) {
    std::vector<OperandAnno> out;
    for (const OperandAnno& op : ops) {
      orig.emplace_back();
      out.push_back(expand_star(op, star, orig.back()));
    }
    return out;
  }

  // Column of identifier k of dim d (of the expanded operand) in the canonical text.
  size_t col(bool output, size_t op, size_t d, size_t k = 0) const {
    size_t od = (output ? out_orig_ : in_orig_)[op][d];
    const OperandCols& oc = cols().side(output)[op];
    return oc.ids[od].size() > k ? oc.ids[od][k] : oc.dims[od];
  }

  // Column where dim d starts (the '(' of a bracket).
  size_t dim_col(bool output, size_t op, size_t d) const {
    return cols().side(output)[op].dims[(output ? out_orig_ : in_orig_)[op][d]];
  }

  static std::string where(size_t i, size_t d) { return "input " + std::to_string(i) + " dim " + std::to_string(d); }

  // `column()` gives where a conflict points (called only for one).
  template <class Column>
  void record(const std::string& name, const Known& k, Column column) {
    auto [it, fresh] = known_.emplace(name, k);
    if (!fresh && it->second.value != k.value)
      throw error_at(column(), "identifier '" + name + "' is " + phrase(it->second) + " but " + phrase(k));
  }

  // Arguments size only identifiers the annotation mentions.
  void take_given() {
    std::set<std::string> names;
    for_each_id(bound_.anno, [&](const IdRef& r) { names.insert(r.id.name); });
    for (const auto& [name, v] : given_) {
      if (!names.count(name)) continue;
      if (v < 0) throw error_at(0, "size given for '" + name + "' is negative (" + std::to_string(v) + ")");
      record(name, Known{v, Known::Given}, [] { return size_t{0}; });
    }
  }

  void take_plain_dims() {
    for (size_t i = 0; i < in_.size(); ++i) {
      const OperandAnno& op = bound_.anno.inputs[i];
      for (size_t d = 0; d < op.dims.size(); ++d) {
        const DimAnno& dim = op.dims[d];
        if (dim.ids.size() != 1) continue;  // '?' or a real bracket
        int64_t size = in_[i].shape[d];
        const DimId& id = dim.ids[0];
        if (id.numeric && literal(id) != size)
          throw error_at(col(false, i, d),
                         where(i, d) + " is " + std::to_string(size) + " but annotation requires " + id.name);
        if (!id.numeric) record(id.name, Known{size, Known::Input, i, d}, [&] { return col(false, i, d); });
      }
    }
  }

  // Repeats until no bracket learns anything: one bracket's solution can be
  // the known factor another bracket needs.
  void solve_brackets() {
    std::set<std::pair<size_t, size_t>> done;
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t i = 0; i < in_.size(); ++i)
        for (size_t d = 0; d < bound_.anno.inputs[i].dims.size(); ++d) {
          if (bound_.anno.inputs[i].dims[d].ids.size() < 2 || done.count({i, d})) continue;
          if (solve_bracket(i, d)) {
            done.insert({i, d});
            progress = true;
          }
        }
    }
    for (size_t i = 0; i < in_.size(); ++i)
      for (size_t d = 0; d < bound_.anno.inputs[i].dims.size(); ++d)
        if (bound_.anno.inputs[i].dims[d].ids.size() >= 2 && !done.count({i, d})) report_unsolvable(i, d);
  }

  // Solves or checks bracket `d` of input `i`; false while two or more factors are unknown.
  bool solve_bracket(size_t i, size_t d) {
    const DimAnno& dim = bound_.anno.inputs[i].dims[d];
    int64_t size = in_[i].shape[d], product = 1;
    std::vector<size_t> unknown;
    std::string known_names;
    for (size_t k = 0; k < dim.ids.size(); ++k) {
      const DimId& id = dim.ids[k];
      auto it = known_.find(id.name);
      if (!id.numeric && it == known_.end()) {
        unknown.push_back(k);
        continue;
      }
      known_names += (known_names.empty() ? "" : "*") + id.name;
      if (__builtin_mul_overflow(product, id.numeric ? literal(id) : it->second.value, &product))
        throw error_at(dim_col(false, i, d),
                       "bracket " + dim_text(dim) + " of " + where(i, d) + ": " + known_names + " is past 64 bits");
    }
    if (unknown.size() > 1) return false;
    auto head = [&] { return bracket_head(i, d); };
    if (unknown.empty()) {
      if (product != size)
        throw error_at(dim_col(false, i, d), head() + ": size " + std::to_string(size) + " but " + known_names + " = " +
                                                 std::to_string(product));
      return true;
    }
    if (product == 0 || size % product != 0) {
      bool lone_number =
          known_names.find('*') == std::string::npos && std::isdigit(static_cast<unsigned char>(known_names[0]));
      std::string by = lone_number ? known_names : known_names + "=" + std::to_string(product);
      throw error_at(dim_col(false, i, d), head() + ": size " + std::to_string(size) + " is not divisible by " + by);
    }
    const DimId& id = dim.ids[unknown[0]];
    record(id.name, Known{size / product, Known::Bracket, i, d}, [&] { return col(false, i, d, unknown[0]); });
    return true;
  }

  [[noreturn]] void report_unsolvable(size_t i, size_t d) {
    const DimAnno& dim = bound_.anno.inputs[i].dims[d];
    std::vector<size_t> unknown;
    for (size_t k = 0; k < dim.ids.size(); ++k)
      if (!dim.ids[k].numeric && !known_.count(dim.ids[k].name)) unknown.push_back(k);
    std::string count = unknown.size() == 2 ? "two" : std::to_string(unknown.size());
    throw error_at(col(false, i, d, unknown[1]), "cannot determine size of '" + dim.ids[unknown[1]].name +
                                                     "' in bracket " + dim_text(dim) + ": " + count +
                                                     " unknown identifiers (give one as an argument)");
  }

  void compute_outputs() {
    for (size_t o = 0; o < bound_.anno.outputs.size(); ++o) {
      const OperandAnno& op = bound_.anno.outputs[o];
      std::vector<int64_t> shape;
      for (size_t d = 0; !op.non_tensor && d < op.dims.size(); ++d) {
        if (op.dims[d].unknown)
          throw error_at(col(true, o, d), "'?' dim in output " + std::to_string(o) + ": its size cannot be determined");
        int64_t size = 1;
        std::string names;
        for (size_t k = 0; k < op.dims[d].ids.size(); ++k) {
          const DimId& id = op.dims[d].ids[k];
          auto it = known_.find(id.name);
          if (!id.numeric && it == known_.end())
            throw error_at(col(true, o, d, k), "identifier '" + id.name + "' in output " + std::to_string(o) +
                                                   " appears in no input and has no given size");
          names += (names.empty() ? "" : "*") + id.name;
          if (__builtin_mul_overflow(size, id.numeric ? literal(id) : it->second.value, &size))
            throw error_at(col(true, o, d), "bracket " + dim_text(op.dims[d]) + " of output " + std::to_string(o) +
                                                " dim " + std::to_string(d) + ": " + names + " is past 64 bits");
        }
        shape.push_back(size);
      }
      bound_.output_shapes.push_back(shape);
    }
  }

  const OpAnno& anno_;
  const std::vector<InputShape>& in_;
  const std::map<std::string, int64_t>& given_;
  mutable std::optional<Columns> cols_;  // see cols()
  std::vector<std::vector<size_t>> in_orig_, out_orig_;
  std::map<std::string, Known> known_;
  BoundAnno bound_;
};

}  // namespace

// Errors point into the canonical text of `anno` (anno.to_string()).
BoundAnno bind(const OpAnno& anno, const std::vector<InputShape>& inputs, const std::map<std::string, int64_t>& given) {
  return Binder(anno, inputs, given).run();
}

// "Matched the rank pattern" is read as "had the right operand count": when
// no candidate fits, the first such candidate's complaint is the most useful.
BoundAnno bind_first(const std::vector<OpAnno>& candidates, const std::vector<InputShape>& inputs,
                     const std::map<std::string, int64_t>& given) {
  if (candidates.empty()) throw DimopError{"no annotation to bind", 0};
  std::optional<DimopError> first, count_matched;
  for (const OpAnno& a : candidates) {
    std::optional<Columns> cols;
    auto columns = [&]() -> const Columns& {
      if (!cols) {
        cols.emplace();
        render(a, &*cols);
      }
      return *cols;
    };
    int64_t star = -1;
    std::optional<DimopError> err = check_fit(a, inputs, columns, star);
    if (!err) return bind(a, inputs, given);
    if (!first) first = err;
    if (!count_matched && a.inputs.size() == inputs.size()) count_matched = err;
  }
  throw count_matched ? *count_matched : *first;
}

}  // namespace nns::sema
