// Benchmark (not a test): parse + elaborate time of a generated 1000-layer
// GPT file. The layers are written out one by one (no loop), so the parser
// sees a large file: 1000 submodule bindings and 1000 forward calls.
//   build/bench_elaborate [LAYERS] [REPEATS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <algorithm>
#include <iostream>

#include "frontend/diagnostics.h"
#include "semantics/interpreter.h"

static std::string generate(int layers) {
  std::string s = "import \"nn\"\nconfig bench { batch = 2  seq = 16  vocab = 128  dim = 32  heads = 2 }\n";
  s += "model DeepGpt(vocab, seq, dim, heads) {\n  param wte: [vocab, dim] = normal(0.02)\n  param wpe: [seq, dim] = normal(0.01)\n";
  for (int i = 0; i < layers; ++i) s += "  block" + std::to_string(i) + " = TransformerBlock(dim, heads)\n";
  s += "  ln_f = LayerNorm(dim)\n  fn forward(ids) {\n    let x = embedding(ids, wte) + wpe\n";
  for (int i = 0; i < layers; ++i) s += "    x = block" + std::to_string(i) + "(x)\n";
  s += "    return linear(ln_f(x), wte)\n  }\n}\n";
  s += "train {\n  model = DeepGpt(cfg.vocab, cfg.seq, cfg.dim, cfg.heads)\n"
       "  input ids: [cfg.batch, cfg.seq] i32 = tokens(cfg.vocab)\n"
       "  input targets: [cfg.batch, cfg.seq] i32 = tokens(cfg.vocab)\n"
       "  loss = cross_entropy(reshape(model(ids), [cfg.batch * cfg.seq, cfg.vocab]), reshape(targets, [cfg.batch * cfg.seq]))\n"
       "  optimizer = adamw(lr = 0.001)\n}\n";
  return s;
}

int main(int argc, char** argv) {
  int layers = argc > 1 ? std::atoi(argv[1]) : 1000;
  int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  std::string path = "/tmp/nns_bench_gpt_" + std::to_string(layers) + ".nns";
  std::string text = generate(layers);
  std::ofstream(path) << text;
  double best_parse = 1e9, best_total = 1e9;
  size_t nodes = 0;
  for (int r = 0; r < repeats; ++r) {
    nns::front::SourceManager sources;
    nns::front::DiagnosticEngine diags(sources);
    nns::sema::Interpreter interp(sources, diags, {});
    auto t0 = std::chrono::steady_clock::now();
    bool ok = interp.parse(path);
    auto t1 = std::chrono::steady_clock::now();
    ok = ok && interp.evaluate();
    auto t2 = std::chrono::steady_clock::now();
    if (!ok) {
      diags.print(std::cerr, false);
      return 1;
    }
    nodes = interp.graph().nodes().size();
    best_parse = std::min(best_parse, std::chrono::duration<double>(t1 - t0).count());
    best_total = std::min(best_total, std::chrono::duration<double>(t2 - t0).count());
  }
  std::printf("generated GPT: %d layers, %zu lines, %zu graph nodes\n", layers,
              static_cast<size_t>(std::count(text.begin(), text.end(), '\n')), nodes);
  std::printf("parse:              %.3f s (best of %d)\n", best_parse, repeats);
  std::printf("parse + elaborate:  %.3f s (best of %d; target < 1 s)\n", best_total, repeats);
  return 0;
}
