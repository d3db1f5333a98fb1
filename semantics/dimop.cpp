// Dimop annotations: printing, lexing, parsing and nnScaler's normalisation
// rules. Binding to shapes is in dimop_binding.cpp, the transform space in
// dimop_transform.cpp. See dimop.h for the language.
#include "semantics/dimop.h"

#include <cctype>
#include <set>
#include <tuple>

#include "semantics/dimop_internal.h"

namespace nns::sema {

using namespace dimop_detail;

namespace {

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

}  // namespace

std::string dimop_detail::render(const OpAnno& a, Columns* cols) {
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

std::string dimop_detail::operand_text(const OperandAnno& op) {
  std::string s;
  render_operand(op, s, nullptr);
  return s;
}

std::string dimop_detail::dim_text(const DimAnno& d) {
  std::string s;
  render_dim(d, s, nullptr);
  return s;
}

namespace {

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

}  // namespace nns::sema
