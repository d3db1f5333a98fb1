// Runs the ANTLR lexer and parser on a file: UTF-8 and size limits first,
// the fast SLL parse with an LL retry, syntax errors as diagnostics. The AST
// walk over the resulting tree is in ast_builder.cpp.
#include "frontend/parser.h"

#include <algorithm>
#include <map>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "frontend/ast_builder.h"

#include "NnsLexer.h"
#include "NnsParser.h"
#include "antlr4-runtime.h"

namespace nns::front {
namespace {

using P = nns_grammar::NnsParser;

// The token types of the declaration keywords, from the grammar's vocabulary.
const std::vector<size_t>& declaration_keywords(const antlr4::dfa::Vocabulary& v) {
  static const std::vector<size_t> types = [&v] {
    static const std::set<std::string> words{"'op'", "'model'", "'plan'", "'train'", "'config'", "'weights'"};
    std::vector<size_t> out;
    for (size_t t = 1; t <= v.getMaxTokenType(); ++t)
      if (words.count(v.getLiteralName(t))) out.push_back(t);
    return out;
  }();
  return types;
}

// Turns ANTLR's syntax errors into our diagnostics, with a friendlier text.
class ErrorCollector : public antlr4::BaseErrorListener {
 public:
  ErrorCollector(int file, DiagnosticEngine& diags) : file_(file), diags_(diags) {}
  int count() const { return count_; }

  void syntaxError(antlr4::Recognizer* recognizer, antlr4::Token* bad, size_t line,
                   size_t col, const std::string& antlr_msg, std::exception_ptr) override {
    if (count_ >= kMaxErrors) return;
    SourceLoc loc{file_, static_cast<int>(line), static_cast<int>(col) + 1, 1};
    std::string msg;
    if (!bad) {  // lexer error: the lexer has a catch-all token, so rare
      msg = antlr_msg;
    } else if (bad->getType() == nns_grammar::NnsLexer::BAD_CHAR) {
      std::string text = bad->getText();
      if (text == "\"")
        msg = "unterminated string literal";
      else
        msg = "unexpected character '" + text + "'";
      // One report per bad character, however many rules trip over it.
      if (line == last_line_ && col == last_col_) return;
    } else if (bad->getType() == antlr4::Token::EOF) {
      // Recovery at the end of the file can trip once per open rule; one
      // report is enough.
      if (eof_reported_) return;
      eof_reported_ = true;
      msg = "unexpected end of file";
      auto* parser = dynamic_cast<antlr4::Parser*>(recognizer);
      // An opener never closed: reported where it opens (where the fix
      // belongs), with a note at the end of the file.
      if (parser && report_unclosed(parser->getTokenStream(), bad)) return;
      if (parser) {
        msg += expected_suffix(parser);
        // Point just past the last real token (where the missing text
        // belongs), not at the line after trailing comments and blanks.
        antlr4::TokenStream* stream = parser->getTokenStream();
        for (size_t i = bad->getTokenIndex(); i-- > 0;) {
          antlr4::Token* t = stream->get(i);
          if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL) continue;
          loc.line = static_cast<int>(t->getLine());
          loc.col = static_cast<int>(t->getCharPositionInLine() + t->getText().size()) + 1;
          break;
        }
      }
      // Like any error, one per line: an earlier error there explains it.
      if (static_cast<size_t>(loc.line) == last_line_) return;
    } else {
      // Recovery often trips again further along the same line; the first
      // error of a line is the useful one.
      if (line == last_line_) return;
      msg = "unexpected '" + bad->getText() + "'";
      auto* parser = dynamic_cast<antlr4::Parser*>(recognizer);
      if (parser) msg += expected_suffix(parser);
      loc.length = std::max<int>(1, static_cast<int>(bad->getText().size()));
    }
    last_line_ = static_cast<size_t>(loc.line);  // where it was reported (EOF errors move)
    last_col_ = static_cast<size_t>(loc.col - 1);
    ++count_;
    diags_.error(loc, msg);
  }

 private:
  static constexpr int kMaxErrors = 20;

  // The delimiter left open at the end of the file, reported at the opener.
  // Which one is missing its closer: brackets match innermost first, so the
  // closer written for an outer block closes the inner one instead. The
  // first closer that starts a line at another indentation than its
  // opener's line is taken as that misplaced closer (the Rust compiler's
  // heuristic); else the innermost opener still open. False if all close.
  bool report_unclosed(antlr4::TokenStream* stream, antlr4::Token* eof) {
    struct Open {
      antlr4::Token* tok;
      size_t indent;  // column of the first token on the opener's line
    };
    std::vector<antlr4::Token*> tokens;
    for (size_t i = 0; i < eof->getTokenIndex(); ++i) {
      antlr4::Token* t = stream->get(i);
      if (t->getChannel() == antlr4::Token::DEFAULT_CHANNEL) tokens.push_back(t);
    }
    std::map<size_t, size_t> line_indent;  // line -> column of its first token
    for (antlr4::Token* t : tokens) line_indent.emplace(t->getLine(), t->getCharPositionInLine());
    std::vector<Open> open;
    antlr4::Token* suspect = nullptr;
    for (antlr4::Token* t : tokens) {
      const std::string text = t->getText();
      if (text == "{" || text == "(" || text == "[") {
        open.push_back({t, line_indent[t->getLine()]});
      } else if (text == "}" || text == ")" || text == "]") {
        if (open.empty()) return false;  // an extra closer: the parser says where
        const bool starts_line = line_indent[t->getLine()] == t->getCharPositionInLine();
        if (!suspect && starts_line && open.back().tok->getLine() != t->getLine() &&
            open.back().indent != t->getCharPositionInLine())
          suspect = open.back().tok;
        open.pop_back();
      }
    }
    if (open.empty()) return false;
    antlr4::Token* opener = suspect ? suspect : open.back().tok;
    const std::string o = opener->getText();
    const std::string closer = o == "{" ? "}" : o == "(" ? ")" : "]";
    SourceLoc at{file_, static_cast<int>(opener->getLine()), static_cast<int>(opener->getCharPositionInLine()) + 1, 1};
    Diagnostic& d = diags_.error(at, "this '" + o + "' is never closed (a '" + closer + "' is missing" +
                                         (suspect ? " here: a later '" + closer + "' at another indentation closes it instead)"
                                                  : ")"));
    SourceLoc end{file_, static_cast<int>(eof->getLine()), static_cast<int>(eof->getCharPositionInLine()) + 1, 1};
    d.notes.push_back({Severity::Note, end, "the file ends here with it still open", {}});
    ++count_;
    return true;
  }

  std::string expected_suffix(antlr4::Parser* parser) {
    antlr4::misc::IntervalSet expected;
    try {
      expected = parser->getExpectedTokens();
    } catch (...) {
      return "";
    }
    // KEYWORD_NAME is the declaration keywords used as names: listed as
    // those keywords (ordered by type, once each), as the grammar took them.
    const size_t keyword_name = nns_grammar::NnsParser::KEYWORD_NAME;
    if (expected.contains(keyword_name)) {
      expected.remove(keyword_name);
      for (size_t k : declaration_keywords(parser->getVocabulary())) expected.add(k);
    }
    std::vector<std::string> names;
    for (size_t t : expected.toList()) {
      if (t == antlr4::Token::EOF) { names.push_back("end of file"); continue; }
      std::string n = parser->getVocabulary().getDisplayName(t);
      if (n == "BAD_CHAR") continue;
      if (n == "ID") n = "a name";
      else if (n == "INT") n = "an integer";
      else if (n == "FLOAT") n = "a number";
      else if (n == "STRING") n = "a string";
      names.push_back(n);
    }
    if (names.empty() || names.size() > 6) return "";
    std::string s = "; expected ";
    for (size_t i = 0; i < names.size(); ++i) {
      if (i) s += i + 1 == names.size() ? " or " : ", ";
      s += names[i];
    }
    return s;
  }

  int file_;
  DiagnosticEngine& diags_;
  int count_ = 0;
  bool eof_reported_ = false;
  size_t last_line_ = 0, last_col_ = static_cast<size_t>(-1);
};

// The byte offset of the first byte that is not part of valid UTF-8, or -1.
int64_t invalid_utf8(const std::string& text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = b[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k)
      if ((b[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
    // Overlong forms, surrogates and code points past U+10FFFF.
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (b[i + k] & 0x3Fu);
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

// Limits that keep parsing fast and its recursion shallow, checked on the
// tokens before the parser runs (the parser would recurse once per level,
// and, since ';' is optional and a statement may start with a sign, it
// looks ahead to the end of a chain at every binary operator: quadratic).
constexpr int kMaxNesting = 256;       // brackets, prefix operators, '**', 'else if', '=>', 'x if c else' in a row
constexpr int kMaxChain = 1000;        // binary operators and postfix links in one chain

bool within_limits(antlr4::CommonTokenStream& tokens, int file, DiagnosticEngine& diags) {
  tokens.fill();
  static const std::set<std::string> open{"(", "[", "{"}, close{")", "]", "}"}, prefix{"-", "+", "not"};
  static const std::set<std::string> binary{"+", "-", "*", "/", "//", "%", "@", "**", "and", "or", "==", "!=", "<", "<=", ">", ">=", "in", ".."};
  int depth = 0, prefix_run = 0, chain = 0, arrows = 0, closed_at = -1, conditionals = 0;
  std::vector<int> else_if{0};
  std::vector<int> pow_at_depth{0};
  std::string prev;
  bool prev_operand = false;  // the previous token ends an operand (a name, a literal, a closing bracket)
  for (antlr4::Token* t : tokens.getTokens()) {
    if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL || t->getType() == antlr4::Token::EOF) continue;
    const std::string text = t->getText();
    SourceLoc at{file, static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1,
                 static_cast<int>(t->getStopIndex() - t->getStartIndex()) + 1};
    auto refuse = [&](const std::string& msg) {
      diags.error(at, msg);
      return false;
    };
    if (open.count(text)) {
      if (++depth > kMaxNesting) return refuse("nesting deeper than " + std::to_string(kMaxNesting) + " brackets");
      pow_at_depth.push_back(0);
    } else if (close.count(text)) {
      depth = std::max(0, depth - 1);
      if (pow_at_depth.size() > 1) pow_at_depth.pop_back();
    }
    // A sign after an operand is a binary operator; otherwise a prefix.
    bool is_prefix = prefix.count(text) && !prev_operand;
    prefix_run = is_prefix ? prefix_run + 1 : 0;
    if (prefix_run > kMaxNesting) return refuse("more than " + std::to_string(kMaxNesting) + " prefix operators in a row");
    if (text == "**" && ++pow_at_depth.back() > kMaxNesting)
      return refuse("more than " + std::to_string(kMaxNesting) + " '**' in one expression (each nests the next)");
    const bool literal_or_name = t->getType() == nns_grammar::NnsLexer::ID || t->getType() == nns_grammar::NnsLexer::INT ||
                                 t->getType() == nns_grammar::NnsLexer::FLOAT || t->getType() == nns_grammar::NnsLexer::STRING ||
                                 text == "true" || text == "false" || text == "none";
    // Postfix links (a.b, x[i], f(x)) nest like binary operators do.
    const bool postfix_link = text == "." || (prev_operand && (text == "[" || text == "("));
    if ((binary.count(text) && !is_prefix) || postfix_link) {
      if (++chain > kMaxChain) return refuse("more than " + std::to_string(kMaxChain) + " operators in one chain (binary operators, '.', indexing, calls); split the expression");
    } else if ((prev_operand && literal_or_name) || text == ";" || text == "{" || text == "}" || text == "let" || text == "return" ||
               text == "for") {
      chain = conditionals = 0;  // a new statement begins
    }
    // An 'if' right after an operand is a conditional expression's; each
    // nests the next ('a if c else b if d else ...'), as the parser recurses.
    if (text == "if" && prev_operand && ++conditionals > kMaxNesting)
      return refuse("more than " + std::to_string(kMaxNesting) +
                    " conditional expressions ('x if c else y') nested in one expression");
    // 'else if' chains nest (each if is the else of the one before), per
    // bracket depth; a '}' not followed by 'else' ends the chain there.
    if (else_if.size() < static_cast<size_t>(depth) + 1) else_if.resize(static_cast<size_t>(depth) + 1, 0);
    if (closed_at >= 0 && text != "else" && static_cast<size_t>(closed_at) < else_if.size()) else_if[static_cast<size_t>(closed_at)] = 0;
    closed_at = text == "}" ? depth : -1;
    if (text == "if" && prev == "else" && ++else_if[static_cast<size_t>(depth)] > kMaxNesting)
      return refuse("more than " + std::to_string(kMaxNesting) + " 'else if' in one chain");
    arrows = text == "=>" ? arrows + 1 : (text == ";" || text == "}" ? 0 : arrows);
    if (arrows > kMaxNesting) return refuse("more than " + std::to_string(kMaxNesting) + " lambdas nested in one expression");
    prev_operand = text == ")" || text == "]" || text == "}" || literal_or_name;
    prev = text;
  }
  tokens.seek(0);
  return true;
}

// A declaration keyword stays a keyword where it starts a top-level
// declaration: outside brackets, before a name ('train' also before '{'),
// and not where an operand or a name must follow the token before it (so
// "x = op" then "y = 1" on the next line keeps 'op' a name). Every other
// one becomes KEYWORD_NAME, which the grammar takes as a name (see ident
// in grammar/Nns.g4). This is the grammar's old choice between the two
// readings of "model M(d) { ... }", made here from three tokens instead of
// by the parser looking ahead to the closing '}'.
void retype_keyword_names(antlr4::CommonTokenStream& tokens, const antlr4::dfa::Vocabulary& vocabulary) {
  static const std::set<std::string> needs_operand{"+",    "-",   "*",   "/",  "//", "%",  "@",  "**",     "and",
                                                   "or",   "==",  "!=",  "<",  "<=", ">",  ">=", "in",     "..",
                                                   "not",  "=",   "+=",  "-=", "*=", "/=", ".",  "return", "if",
                                                   "else", "for", "let", "as", "=>", ",",  ":",  "|",      "extends"};
  const std::vector<size_t>& keywords = declaration_keywords(vocabulary);
  std::vector<antlr4::Token*> toks;
  for (antlr4::Token* t : tokens.getTokens())
    if (t->getChannel() == antlr4::Token::DEFAULT_CHANNEL && t->getType() != antlr4::Token::EOF) toks.push_back(t);
  int depth = 0;
  for (size_t i = 0; i < toks.size(); ++i) {
    const size_t type = toks[i]->getType();
    if (std::find(keywords.begin(), keywords.end(), type) == keywords.end()) {
      const std::string text = type == nns_grammar::NnsLexer::ID ? "" : toks[i]->getText();
      if (text == "(" || text == "[" || text == "{") ++depth;
      if ((text == ")" || text == "]" || text == "}") && depth > 0) --depth;
      continue;
    }
    const size_t next = i + 1 < toks.size() ? toks[i + 1]->getType() : antlr4::Token::EOF;
    const bool before_name = next == nns_grammar::NnsLexer::ID ||
                             (toks[i]->getText() == "train" && i + 1 < toks.size() && toks[i + 1]->getText() == "{");
    const bool after_operator = i > 0 && needs_operand.count(toks[i - 1]->getText());
    if (depth > 0 || !before_name || after_operator)
      static_cast<antlr4::WritableToken*>(toks[i])->setType(nns_grammar::NnsParser::KEYWORD_NAME);
  }
}

// The full-LL retry after SLL fails looks ahead to the end of every chain
// at every operator of it (an SLL conflict the outer context cannot settle:
// `a + b` may be `a` then `+b`), without caching: a 600-term sum before a
// syntax error took 40 s, 100 terms 1 s (found by fuzz_interpreter). Its
// work is the tokens it consumes, lookahead included: files that are not
// pathological consume under 10 per token. Past kLookaheadPerToken per token
// (plus kLookaheadSlack) the retry stops, and the errors come from SLL
// with recovery: the same errors, except in files whose only parse needs
// the outer context past a long chain.
constexpr size_t kLookaheadPerToken = 4, kLookaheadSlack = 1000;

// A token stream that, once its budget of consumes is spent, shows end of
// file: the parse in progress then ends at once (an exception thrown
// through ANTLR's prediction would leak its configuration sets).
class BoundedTokenStream : public antlr4::CommonTokenStream {
 public:
  using CommonTokenStream::CommonTokenStream;
  void set_budget(size_t consumes) {
    left_ = consumes;
    exhausted_ = false;
  }
  bool exhausted() const { return exhausted_; }
  void consume() override {
    if (!exhausted_ && left_ == 0) exhausted_ = true;
    if (exhausted_) return;
    --left_;
    CommonTokenStream::consume();
  }
  antlr4::Token* LT(ssize_t k) override { return exhausted_ && k > 0 ? get(size() - 1) : CommonTokenStream::LT(k); }
  size_t LA(ssize_t i) override { return exhausted_ && i > 0 ? antlr4::Token::EOF : CommonTokenStream::LA(i); }

 private:
  size_t left_ = SIZE_MAX;
  bool exhausted_ = false;
};

}  // namespace

bool check_utf8(const SourceManager& sources, int file, DiagnosticEngine& diags) {
  const SourceFile& f = sources.file(file);
  const int64_t bad = invalid_utf8(f.text);
  if (bad < 0) return true;
  int line = 1, col = 1;
  for (int64_t i = 0; i < bad; ++i) {
    if (f.text[static_cast<size_t>(i)] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(f.text[static_cast<size_t>(i)]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(f.text[static_cast<size_t>(bad)]));
  diags.error(SourceLoc{file, line, col, 1}, std::string("invalid UTF-8: byte ") + byte + " at offset " + std::to_string(bad));
  return false;
}

std::unique_ptr<Program> parse_program(const SourceManager& sources, int file, DiagnosticEngine& diags) {
  const SourceFile& f = sources.file(file);
  if (!check_utf8(sources, file, diags)) {
    auto empty = std::make_unique<Program>();
    empty->file = file;
    return empty;
  }
  antlr4::ANTLRInputStream input(f.text);
  nns_grammar::NnsLexer lexer(&input);
  BoundedTokenStream tokens(&lexer);
  nns_grammar::NnsParser parser(&tokens);
  ErrorCollector errors(file, diags);
  lexer.removeErrorListeners();
  lexer.addErrorListener(&errors);
  if (!within_limits(tokens, file, diags)) {
    auto empty = std::make_unique<Program>();
    empty->file = file;
    return empty;
  }
  retype_keyword_names(tokens, lexer.getVocabulary());
  // SLL first (fast), silent; fall back to full LL only if SLL fails, as
  // the ANTLR documentation recommends for speed. Errors come from the retry.
  parser.removeErrorListeners();
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  parser.setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
  P::ProgramContext* tree = nullptr;
  int ll_error_count = 0;
  try {
    tree = parser.program();
  } catch (antlr4::ParseCancellationException&) {
    // Full LL with recovery; its errors wait until it finishes in budget.
    DiagnosticEngine ll_diags(sources);
    ErrorCollector ll_errors(file, ll_diags);
    parser.addErrorListener(&ll_errors);
    parser.setErrorHandler(std::make_shared<antlr4::DefaultErrorStrategy>());
    auto retry = [&](antlr4::atn::PredictionMode mode) {
      tokens.seek(0);
      parser.reset();
      parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(mode);
      return parser.program();
    };
    // A stray character is an error whatever the parse: the LL retry would
    // only spend its budget (a 7 KB chain cut by control characters took
    // 0.5 s, found by fuzz_interpreter); SLL with recovery reports it.
    bool stray = false;
    for (antlr4::Token* t : tokens.getTokens()) stray = stray || t->getType() == nns_grammar::NnsLexer::BAD_CHAR;
    tokens.set_budget(stray ? 0 : kLookaheadPerToken * tokens.size() + kLookaheadSlack);
    if (!stray) tree = retry(antlr4::atn::PredictionMode::LL);
    const bool exhausted = stray || tokens.exhausted();
    tokens.set_budget(SIZE_MAX);
    if (!exhausted) {
      for (const Diagnostic& d : ll_diags.all()) diags.report(d);
      ll_error_count = ll_errors.count();
    } else {
      parser.removeErrorListeners();
      parser.addErrorListener(&errors);
      tree = retry(antlr4::atn::PredictionMode::SLL);
    }
  }
  if (errors.count() + ll_error_count > 0) {
    // The tree has holes where recovery happened; the caller stops after
    // reporting, so an empty program is enough.
    auto empty = std::make_unique<Program>();
    empty->file = file;
    return empty;
  }
  BuiltAst built = build_ast(tree, file);
  for (const SourceLoc& l : built.overflow) diags.error(l, "integer literal is too large");
  for (const auto& [l, msg] : built.float_range) diags.error(l, msg);
  return std::move(built.program);
}

std::vector<DecisionLookahead> lookahead_profile(const SourceManager& sources, int file) {
  antlr4::ANTLRInputStream input(sources.file(file).text);
  nns_grammar::NnsLexer lexer(&input);
  lexer.removeErrorListeners();
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  retype_keyword_names(tokens, lexer.getVocabulary());
  nns_grammar::NnsParser parser(&tokens);
  parser.removeErrorListeners();
  parser.setProfile(true);
  // As parse_program: SLL, then full LL if SLL fails.
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  parser.setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
  try {
    parser.program();
  } catch (antlr4::ParseCancellationException&) {
    tokens.seek(0);
    parser.reset();
    parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::LL);
    parser.setErrorHandler(std::make_shared<antlr4::DefaultErrorStrategy>());
    parser.program();
  }
  std::vector<DecisionLookahead> out;
  for (const antlr4::atn::DecisionInfo& d : parser.getParseInfo().getDecisionInfo()) {
    if (d.invocations == 0) continue;
    const size_t rule = parser.getATN().getDecisionState(d.decision)->ruleIndex;
    out.push_back({parser.getRuleNames()[rule], d.decision, d.invocations, d.SLL_MaxLook, d.LL_MaxLook});
  }
  return out;
}

std::string dump_tokens(const SourceManager& sources, int file) {
  const SourceFile& f = sources.file(file);
  antlr4::ANTLRInputStream input(f.text);
  nns_grammar::NnsLexer lexer(&input);
  lexer.removeErrorListeners();
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  std::ostringstream out;
  for (antlr4::Token* t : tokens.getTokens()) {
    if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL) continue;
    std::string kind = t->getType() == antlr4::Token::EOF
                           ? "EOF"
                           : std::string(lexer.getVocabulary().getSymbolicName(t->getType()));
    // Literal tokens of the grammar have no symbolic name: keywords and punctuation.
    if (kind.empty()) kind = std::isalpha(static_cast<unsigned char>(t->getText()[0])) ? "KEYWORD" : "PUNCT";
    out << t->getLine() << ":" << t->getCharPositionInLine() + 1 << " " << kind;
    if (t->getType() != antlr4::Token::EOF) out << " " << t->getText();
    out << "\n";
  }
  return out.str();
}

}  // namespace nns::front
