// Dimop annotations: parsing, nnScaler's normalisation rules, binding to
// shapes and the transform space. See dimop.h for the language.
#include "semantics/dimop.h"

#include <cctype>
#include <set>
#include <tuple>

namespace nns::sema {

namespace {

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

DimopError error_at(size_t column, std::string message) { return DimopError{std::move(message), column}; }

std::string operand_name(bool output, size_t index) {
  return (output ? "output " : "input ") + std::to_string(index);
}

// The identifier of a dim that a split of the dim splits: the first one,
// after any leading '1's ("(1 1 b c)": b), as nnScaler has it.
size_t leading_position(const DimAnno& d) {
  size_t k = 0;
  while (k + 1 < d.ids.size() && d.ids[k].numeric && d.ids[k].name == "1") ++k;
  return k;
}

// ---- printing ---------------------------------------------------------------

// As nnScaler's OpAnno prints: every identifier with its reduce suffix at
// every occurrence, numbers (always frozen) with '^': "(1^ b c^)".
void render_dim(const DimAnno& d, std::string& out, std::vector<size_t>* id_cols) {
  if (d.star) { out += '*'; return; }
  if (d.unknown) { out += '?'; return; }
  if (d.bracketed) out += '(';
  for (size_t k = 0; k < d.ids.size(); ++k) {
    const DimId& id = d.ids[k];
    if (k) out += ' ';
    if (id_cols) id_cols->push_back(out.size());
    out += id.name;
    out += id.numeric ? "^" : reduce_suffix(id.reduce);
  }
  if (d.bracketed) out += ')';
}

void render_operand(const OperandAnno& op, std::string& out, OperandCols* cols) {
  if (cols) cols->col = out.size();
  if (op.non_tensor) { out += '?'; return; }
  for (size_t d = 0; d < op.dims.size(); ++d) {
    if (d) out += ' ';
    if (cols) cols->dims.push_back(out.size());
    std::vector<size_t> id_cols;
    render_dim(op.dims[d], out, &id_cols);
    if (cols) cols->ids.push_back(id_cols);
  }
}

std::string render(const OpAnno& a, Columns* cols) {
  std::string out;
  if (cols) *cols = Columns{};
  auto side = [&](const std::vector<OperandAnno>& ops, std::vector<OperandCols>* c) {
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i) out += ", ";
      OperandCols oc;
      render_operand(ops[i], out, &oc);
      if (c) c->push_back(oc);
    }
  };
  side(a.inputs, cols ? &cols->inputs : nullptr);
  out += a.inputs.empty() ? "-> " : " -> ";
  side(a.outputs, cols ? &cols->outputs : nullptr);
  return out;
}

std::string operand_text(const OperandAnno& op) {
  std::string s;
  render_operand(op, s, nullptr);
  return s;
}

std::string dim_text(const DimAnno& d) {
  std::string s;
  render_dim(d, s, nullptr);
  return s;
}

// ---- lexing -----------------------------------------------------------------

struct Token {
  enum Kind { Ident, LParen, RParen, Comma, Arrow, Star, Question } kind = Ident;
  DimId id;  // Ident only
  size_t col = 0;
};

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

Token lex_word(std::string_view t, size_t& i) {
  size_t start = i;
  while (i < t.size() && is_word_char(t[i])) ++i;
  Token tok{Token::Ident, {std::string(t.substr(start, i - start))}, start};
  std::string& name = tok.id.name;
  tok.id.numeric = std::isdigit(static_cast<unsigned char>(name[0])) != 0;
  if (tok.id.numeric) {
    for (char c : name)
      if (!std::isdigit(static_cast<unsigned char>(c)))
        throw error_at(start, "identifier '" + name + "' must start with a letter or underscore");
    if (name.size() > 18) throw error_at(start, "number '" + name + "' is too large");
    tok.id.reduce = Reduce::Frozen;
  }
  if (i < t.size() && (t[i] == '+' || t[i] == '^')) {
    // A number is frozen whatever its suffix ("8^", as nnScaler writes it).
    tok.id.reduce = tok.id.numeric ? Reduce::Frozen : t[i] == '+' ? Reduce::Sum : Reduce::Frozen;
    ++i;
  }
  return tok;
}

std::vector<Token> lex(std::string_view t) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < t.size()) {
    char c = t[i];
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (is_word_char(c)) { out.push_back(lex_word(t, i)); continue; }
    Token tok;
    tok.col = i;
    if (c == '-' && i + 1 < t.size() && t[i + 1] == '>') {
      tok.kind = Token::Arrow;
      out.push_back(tok);
      i += 2;
      continue;
    }
    switch (c) {
      case '(': tok.kind = Token::LParen; break;
      case ')': tok.kind = Token::RParen; break;
      case ',': tok.kind = Token::Comma; break;
      case '*': tok.kind = Token::Star; break;
      case '?': tok.kind = Token::Question; break;
      case '+': case '^':
        throw error_at(i, std::string("reduce suffix '") + c + "' must directly follow an identifier");
      default:
        throw error_at(i, std::string("unexpected character '") + c + "' in annotation");
    }
    out.push_back(tok);
    ++i;
  }
  return out;
}

// ---- parsing ----------------------------------------------------------------

using TokIt = std::vector<Token>::const_iterator;

// "(h t)": `open` points at '(' and is left on the matching ')'.
DimAnno parse_bracket(TokIt& open, TokIt end, std::vector<size_t>& id_cols) {
  DimAnno d;
  d.bracketed = true;
  TokIt it = open + 1;
  for (; it != end && it->kind != Token::RParen; ++it) {
    if (it->kind == Token::LParen) throw error_at(it->col, "nested brackets are not allowed");
    if (it->kind != Token::Ident)
      throw error_at(it->col, std::string("'") + (it->kind == Token::Star ? '*' : '?') +
                                  "' cannot appear inside a bracket");
    d.ids.push_back(it->id);
    id_cols.push_back(it->col);
  }
  if (it == end) throw error_at(open->col, "unclosed '('");
  if (d.ids.empty()) throw error_at(open->col, "empty bracket '()'");
  open = it;
  return d;
}

OperandAnno parse_operand(TokIt begin, TokIt end, OperandCols& cols) {
  OperandAnno op;
  cols.col = begin->col;
  if (end - begin == 1 && begin->kind == Token::Question) {
    op.non_tensor = true;
    return op;
  }
  for (TokIt it = begin; it != end; ++it) {
    DimAnno d;
    std::vector<size_t> id_cols;
    cols.dims.push_back(it->col);
    switch (it->kind) {
      case Token::Ident: d.ids.push_back(it->id); id_cols.push_back(it->col); break;
      case Token::Star: d.star = true; break;
      case Token::Question: d.unknown = true; break;
      case Token::LParen: d = parse_bracket(it, end, id_cols); break;
      default: throw error_at(it->col, "unbalanced ')'");
    }
    op.dims.push_back(d);
    cols.ids.push_back(id_cols);
  }
  return op;
}

// One side of '->': operands separated by commas. `end_col` is where the
// side ends in the text (for errors about what is missing there).
std::vector<OperandAnno> parse_side(TokIt begin, TokIt end, size_t end_col, bool is_output,
                                    std::vector<OperandCols>& cols) {
  std::vector<OperandAnno> ops;
  if (begin == end) {
    if (is_output) throw error_at(end_col, "missing outputs after '->'");
    return ops;  // an op that creates tensors has no inputs
  }
  TokIt start = begin;
  for (TokIt it = begin;; ++it) {
    if (it != end && it->kind != Token::Comma) continue;
    if (it == start)
      throw error_at(it == end ? end_col : it->col, "empty operand (write '?' for a non-tensor value)");
    cols.emplace_back();
    ops.push_back(parse_operand(start, it, cols.back()));
    if (it == end) break;
    start = it + 1;
  }
  return ops;
}

OpAnno parse_with_columns(std::string_view text, Columns& cols) {
  std::vector<Token> toks = lex(text);
  TokIt arrow = toks.end();
  for (TokIt it = toks.begin(); it != toks.end(); ++it) {
    if (it->kind != Token::Arrow) continue;
    if (arrow != toks.end()) throw error_at(it->col, "more than one '->' in annotation");
    arrow = it;
  }
  if (arrow == toks.end()) throw error_at(text.size(), "missing '->' between inputs and outputs");
  OpAnno a;
  a.inputs = parse_side(toks.cbegin(), arrow, arrow->col, false, cols.inputs);
  a.outputs = parse_side(arrow + 1, toks.cend(), text.size(), true, cols.outputs);
  return a;
}

// ---- normalisation ----------------------------------------------------------

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

size_t col_of(const Columns& c, const IdRef& r) { return c.side(r.output)[r.op].ids[r.dim][r.pos]; }

bool is_bracket_tail(const OpAnno& a, const IdRef& r) {
  const OperandAnno& op = (r.output ? a.outputs : a.inputs)[r.op];
  return op.dims[r.dim].bracketed && r.pos > leading_position(op.dims[r.dim]);
}

void check_stars(const OpAnno& a, const Columns& c) {
  bool input_star = false;
  for (bool output : {false, true}) {
    const std::vector<OperandAnno>& ops = output ? a.outputs : a.inputs;
    for (size_t o = 0; o < ops.size(); ++o) {
      int stars = 0;
      for (size_t d = 0; d < ops[o].dims.size(); ++d) {
        if (!ops[o].dims[d].star) continue;
        size_t col = c.side(output)[o].dims[d];
        if (++stars > 1) throw error_at(col, "'*' appears twice in " + operand_name(output, o));
        if (!output) input_star = true;
        if (output && !input_star)
          throw error_at(col, "'*' in " + operand_name(output, o) + " but no input has '*' (its dims come from the inputs)");
      }
    }
  }
}

void check_output_unknown_dims(const OpAnno& a, const Columns& c) {
  for (size_t o = 0; o < a.outputs.size(); ++o)
    for (size_t d = 0; d < a.outputs[o].dims.size(); ++d)
      if (a.outputs[o].dims[d].unknown)
        throw error_at(c.outputs[o].dims[d], "'?' dim in output " + std::to_string(o) + ": its size cannot be determined");
}

// One identifier, one reduce kind, as written at every occurrence
// (nnScaler's rule: "a b^, b^ c -> a c^" is an error naming c).
void check_reduce_kinds(const OpAnno& a, const Columns& c) {
  std::map<std::string, std::pair<Reduce, size_t>> seen;  // kind and column of first written
  for_each_id(a, [&](const IdRef& r) {
    if (r.id.numeric) return;
    auto [it, fresh] = seen.emplace(r.id.name, std::make_pair(r.id.reduce, col_of(c, r)));
    if (fresh || it->second.first == r.id.reduce) return;
    throw error_at(col_of(c, r), "identifier '" + r.id.name + "' is written '" + r.id.name +
                                     reduce_suffix(r.id.reduce) + "' here but '" + r.id.name +
                                     reduce_suffix(it->second.first) + "' at column " +
                                     std::to_string(it->second.second) +
                                     "; an identifier has one reduce kind everywhere");
  });
}

// Numeric dims and identifiers after the leading one of a bracket (leading
// '1's skipped: in "(1 b c)" b leads) cannot be split: make them Frozen at
// every occurrence.
void freeze_implicit(OpAnno& a) {
  std::set<std::string> tails;
  for_each_id(a, [&](const IdRef& r) {
    if (is_bracket_tail(a, r) && !r.id.numeric) tails.insert(r.id.name);
  });
  for (std::vector<OperandAnno>* ops : {&a.inputs, &a.outputs})
    for (OperandAnno& op : *ops)
      for (DimAnno& d : op.dims)
        for (DimId& id : d.ids)
          if (id.numeric || tails.count(id.name)) id.reduce = Reduce::Frozen;
}

// '*' in an input must reach an output. (A spatial identifier that no
// output has is accepted, as nnScaler does; splitting it makes the outputs
// partial sums, see dim_choice.)
void check_stars_reach_outputs(const OpAnno& a, const Columns& c) {
  bool tensor_output = false;
  for (const OperandAnno& op : a.outputs) tensor_output = tensor_output || !op.non_tensor;
  if (!tensor_output) return;
  std::set<std::string> in_outputs;
  bool star_out = false;
  for (const OperandAnno& op : a.outputs)
    for (const DimAnno& d : op.dims) {
      star_out = star_out || d.star;
      for (const DimId& id : d.ids) in_outputs.insert(id.name);
    }
  for (size_t o = 0; o < a.inputs.size(); ++o)
    for (size_t d = 0; d < a.inputs[o].dims.size(); ++d) {
      const DimAnno& dim = a.inputs[o].dims[d];
      if (dim.star && !star_out)
        throw error_at(c.inputs[o].dims[d], "'*' appears in input " + std::to_string(o) + " but in no output");
    }
}

OpAnno normalize_with_columns(OpAnno a, const Columns& c) {
  check_stars(a, c);
  check_output_unknown_dims(a, c);
  check_reduce_kinds(a, c);
  freeze_implicit(a);
  check_stars_reach_outputs(a, c);
  return a;
}

// ---- binding ----------------------------------------------------------------

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
std::optional<DimopError> check_fit(const OpAnno& a, const std::vector<InputShape>& in, const Columns& c,
                                    int64_t& star) {
  star = -1;
  if (a.inputs.size() != in.size())
    return error_at(0, "annotation '" + render(a, nullptr) + "' expects " + count_of(a.inputs.size(), "input") +
                           " but the call has " + std::to_string(in.size()));
  size_t star_from = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const OperandAnno& op = a.inputs[i];
    std::string head = "input " + std::to_string(i);
    if (op.non_tensor != !in[i].is_tensor)
      return error_at(c.inputs[i].col, op.non_tensor ? head + " is a tensor but the annotation has '?' (a non-tensor value) there"
                                                     : head + " is not a tensor but annotation '" + operand_text(op) + "' expects one");
    if (op.non_tensor) continue;
    size_t rank = in[i].shape.size(), fixed = op.dims.size();
    bool has_star = star_position(op) < fixed;
    if (has_star) --fixed;
    std::string prefix = head + " has rank " + std::to_string(rank) + " but annotation '" + operand_text(op) + "' expects ";
    if (!has_star && rank != fixed) return error_at(c.inputs[i].col, prefix + dims_word(fixed));
    if (!has_star) continue;
    if (rank < fixed) return error_at(c.inputs[i].col, prefix + "at least " + dims_word(fixed));
    int64_t here = static_cast<int64_t>(rank - fixed);
    if (star < 0) {
      star = here;
      star_from = i;
    } else if (here != star) {
      return error_at(c.inputs[i].col, prefix + dims_word(fixed + star) + " ('*' covers " + dims_word(star) +
                                           ", fixed by input " + std::to_string(star_from) + ")");
    }
  }
  for (size_t o = 0; o < a.outputs.size(); ++o)
    if (star < 0 && star_position(a.outputs[o]) < a.outputs[o].dims.size())
      return error_at(c.outputs[o].col, "'*' in output " + std::to_string(o) + " but no input has '*'");
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
      : anno_(a), in_(in), given_(given) {
    render(anno_, &cols_);
  }

  BoundAnno run() {
    int64_t star = -1;
    if (auto err = check_fit(anno_, in_, cols_, star)) throw *err;
    bound_.anno.inputs = expand_side(anno_.inputs, star, in_orig_);
    bound_.anno.outputs = expand_side(anno_.outputs, star, out_orig_);
    take_given();
    take_plain_dims();
    solve_brackets();
    compute_outputs();
    for (const auto& [name, k] : known_) bound_.sizes[name] = k.value;
    return bound_;
  }

 private:
  struct Known {
    int64_t value;
    std::string phrase;  // "64 in input 0 dim 1", "given as 64"
  };

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
    const OperandCols& oc = cols_.side(output)[op];
    return oc.ids[od].size() > k ? oc.ids[od][k] : oc.dims[od];
  }

  // Column where dim d starts (the '(' of a bracket).
  size_t dim_col(bool output, size_t op, size_t d) const {
    return cols_.side(output)[op].dims[(output ? out_orig_ : in_orig_)[op][d]];
  }

  static std::string where(size_t i, size_t d) { return "input " + std::to_string(i) + " dim " + std::to_string(d); }

  void record(const std::string& name, int64_t value, const std::string& phrase, size_t column) {
    auto [it, fresh] = known_.emplace(name, Known{value, phrase});
    if (!fresh && it->second.value != value)
      throw error_at(column, "identifier '" + name + "' is " + it->second.phrase + " but " + phrase);
  }

  // Arguments size only identifiers the annotation mentions.
  void take_given() {
    std::set<std::string> names;
    for_each_id(bound_.anno, [&](const IdRef& r) { names.insert(r.id.name); });
    for (const auto& [name, v] : given_) {
      if (!names.count(name)) continue;
      if (v < 0) throw error_at(0, "size given for '" + name + "' is negative (" + std::to_string(v) + ")");
      record(name, v, "given as " + std::to_string(v), 0);
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
          throw error_at(col(false, i, d), where(i, d) + " is " + std::to_string(size) + " but annotation requires " + id.name);
        if (!id.numeric) record(id.name, size, std::to_string(size) + " in " + where(i, d), col(false, i, d));
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
        throw error_at(dim_col(false, i, d), "bracket " + dim_text(dim) + " of " + where(i, d) + ": " + known_names + " is past 64 bits");
    }
    std::string head = "bracket " + dim_text(dim) + " of " + where(i, d);
    if (unknown.size() > 1) return false;
    if (unknown.empty()) {
      if (product != size)
        throw error_at(dim_col(false, i, d), head + ": size " + std::to_string(size) + " but " + known_names + " = " +
                                             std::to_string(product));
      return true;
    }
    if (product == 0 || size % product != 0) {
      bool lone_number = known_names.find('*') == std::string::npos && std::isdigit(static_cast<unsigned char>(known_names[0]));
      std::string by = lone_number ? known_names : known_names + "=" + std::to_string(product);
      throw error_at(dim_col(false, i, d), head + ": size " + std::to_string(size) + " is not divisible by " + by);
    }
    const DimId& id = dim.ids[unknown[0]];
    record(id.name, size / product, std::to_string(size / product) + " from " + head, col(false, i, d, unknown[0]));
    return true;
  }

  [[noreturn]] void report_unsolvable(size_t i, size_t d) {
    const DimAnno& dim = bound_.anno.inputs[i].dims[d];
    std::vector<size_t> unknown;
    for (size_t k = 0; k < dim.ids.size(); ++k)
      if (!dim.ids[k].numeric && !known_.count(dim.ids[k].name)) unknown.push_back(k);
    std::string count = unknown.size() == 2 ? "two" : std::to_string(unknown.size());
    throw error_at(col(false, i, d, unknown[1]), "cannot determine size of '" + dim.ids[unknown[1]].name + "' in bracket " +
                                                     dim_text(dim) + ": " + count +
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
            throw error_at(col(true, o, d), "bracket " + dim_text(op.dims[d]) + " of output " + std::to_string(o) + " dim " + std::to_string(d) +
                                                ": " + names + " is past 64 bits");
        }
        shape.push_back(size);
      }
      bound_.output_shapes.push_back(shape);
    }
  }

  const OpAnno& anno_;
  const std::vector<InputShape>& in_;
  const std::map<std::string, int64_t>& given_;
  Columns cols_;  // of the unexpanded annotation's canonical text
  std::vector<std::vector<size_t>> in_orig_, out_orig_;
  std::map<std::string, Known> known_;
  BoundAnno bound_;
};

// ---- transform space --------------------------------------------------------

// `partial`: an output without the identifier holds partial sums ('+', or
// a spatial identifier that no output has).
PartitionEffect effect_on(const OperandAnno& op, const std::string& id, bool output, bool partial) {
  if (op.non_tensor) return {PartitionEffect::NotTensor, -1};
  for (size_t d = 0; d < op.dims.size(); ++d)
    if (!op.dims[d].ids.empty() && op.dims[d].ids[leading_position(op.dims[d])].name == id) return {PartitionEffect::Split, static_cast<int>(d)};
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
    if (op.non_tensor) { c.inputs.push_back({PartitionEffect::NotTensor, -1}); continue; }
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

// ---- public API -------------------------------------------------------------

const char* reduce_suffix(Reduce r) {
  switch (r) {
    case Reduce::Sum: return "+";
    case Reduce::Frozen: return "^";
    case Reduce::Spatial: break;
  }
  return "";
}

std::string OpAnno::to_string() const { return render(*this, nullptr); }

OpAnno parse_annotation(std::string_view text) {
  Columns cols;
  return parse_with_columns(text, cols);
}

// Without the user's text, error columns point into the canonical text.
OpAnno normalize(OpAnno anno) {
  Columns cols;
  render(anno, &cols);
  return normalize_with_columns(std::move(anno), cols);
}

OpAnno parse_normalized(std::string_view text) {
  Columns cols;
  OpAnno a = parse_with_columns(text, cols);
  return normalize_with_columns(std::move(a), cols);
}

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
    Columns cols;
    render(a, &cols);
    int64_t star = -1;
    std::optional<DimopError> err = check_fit(a, inputs, cols, star);
    if (!err) return bind(a, inputs, given);
    if (!first) first = err;
    if (!count_matched && a.inputs.size() == inputs.size()) count_matched = err;
  }
  throw count_matched ? *count_matched : *first;
}

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
    if (r.pos != leading_position(op.dims[r.dim]) || r.id.numeric || r.id.reduce == Reduce::Frozen || repeated.count(r.id.name)) return;
    if (seen.insert(r.id.name).second) out.push_back(dim_choice(bound, r.id));
  });
  if (allow_value_split) out.push_back(value_choice(bound));
  return out;
}

std::optional<TransformChoice> choice_for(const BoundAnno& bound, int input_index, int dim) {
  if (input_index < 0 || input_index >= static_cast<int>(bound.anno.inputs.size())) return std::nullopt;
  const OperandAnno& op = bound.anno.inputs[input_index];
  if (dim < 0 || dim >= static_cast<int>(op.dims.size()) || op.dims[dim].ids.empty()) return std::nullopt;
  const DimId& id = op.dims[dim].ids[leading_position(op.dims[dim])];
  if (id.numeric || id.reduce == Reduce::Frozen) return std::nullopt;
  for (const TransformChoice& c : transform_space(bound))
    if (c.kind == TransformChoice::Dim && c.id == id.name) return c;
  return std::nullopt;
}

std::string TransformChoice::describe() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < inputs.size(); ++i) parts.push_back("in" + std::to_string(i) + " " + effect_text(inputs[i]));
  for (size_t o = 0; o < outputs.size(); ++o) parts.push_back("out" + std::to_string(o) + " " + effect_text(outputs[o]));
  std::string s = kind == Value ? "value: " : id + reduce_suffix(reduce) + " (size " + std::to_string(size) + "): ";
  for (size_t p = 0; p < parts.size(); ++p) s += (p ? ", " : "") + parts[p];
  return s;
}

}  // namespace nns::sema
