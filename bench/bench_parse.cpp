// Benchmark (not a test): parse time alone of .nns files (lexer, parser,
// AST). ANTLR's prediction cache (its DFA) lives as long as the process, so
// the first parse of a process pays for building it, as `nns check` does;
// the later ones show the cached speed. Run one process per file for the
// cold number of each file.
//   build/bench_parse FILE... [--repeats N] [--profile] [--ast]
// prints per file: "first X ms  median Y ms (N repeats)  FILE"; with
// --profile, also each grammar decision that looked ahead more than two
// tokens (ANTLR's profiler: rule, decision, largest SLL and LL lookahead).
// --ast prints each file's AST dump (as --emit=ast) instead of timing it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "frontend/ast_printer.h"
#include "frontend/diagnostics.h"
#include "frontend/parser.h"

namespace {

// Milliseconds of one parse of `path`; negative when it has errors.
double parse_ms(const std::string& path) {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags(sources);
  int file = sources.load(path);
  if (file < 0) return -1;
  auto t0 = std::chrono::steady_clock::now();
  auto program = nns::front::parse_program(sources, file, diags);
  auto t1 = std::chrono::steady_clock::now();
  if (diags.error_count() > 0) {
    diags.print(std::cerr, false);
    return -1;
  }
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

void print_ast(const std::string& path) {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags(sources);
  int file = sources.load(path);
  if (file < 0) return;
  auto program = nns::front::parse_program(sources, file, diags);
  diags.print(std::cout, false);
  std::cout << nns::front::dump_ast(*program);
}

void print_profile(const std::string& path) {
  nns::front::SourceManager sources;
  int file = sources.load(path);
  for (const nns::front::DecisionLookahead& d : nns::front::lookahead_profile(sources, file))
    if (d.sll_max_look > 2 || d.ll_max_look > 2)
      std::printf("    decision %3zu in %-14s max lookahead SLL %5lld  LL %5lld  (%lld predictions)\n", d.decision,
                  d.rule.c_str(), d.sll_max_look, d.ll_max_look, d.invocations);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  int repeats = 20;
  bool profile = false, ast = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--profile")
      profile = true;
    else if (a == "--ast")
      ast = true;
    else if (a == "--repeats" && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else
      files.push_back(a);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: bench_parse FILE... [--repeats N]\n");
    return 2;
  }
  for (const std::string& f : files) {
    if (ast) {
      print_ast(f);
      continue;
    }
    double first = parse_ms(f);
    if (first < 0) return 1;
    std::vector<double> warm;
    for (int r = 0; r < repeats; ++r) warm.push_back(parse_ms(f));
    std::sort(warm.begin(), warm.end());
    std::printf("first %8.2f ms  median %8.2f ms (%d repeats)  %s\n", first, warm[warm.size() / 2], repeats, f.c_str());
    if (profile) print_profile(f);
  }
  return 0;
}
