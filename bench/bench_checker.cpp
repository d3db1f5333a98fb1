// Checker benchmark: time to prove a plan legal (encoding + solving), for
// gpt.nns megatron and swin.nns coshard at their large presets on 32 and
// 1024 devices — once with symbolic sizes (one proof for every admissible
// size) and, as the baseline, by brute force: the same checks on the graph
// elaborated for each concrete size in a range, one after the other.
//
//   build/bench/bench_checker            every scenario
//   build/bench/bench_checker 32         only the 32-device ones
//
// The presets as shipped are not legal at these device counts (gpt3_1_3b
// has 16 heads; swin_32gpu's batch of 32 cannot feed 256 data-parallel
// groups), so each scenario appends a config to a copy of the example:
// more heads for megatron, a larger batch for coshard. Times are wall
// clock on this machine; elaboration and plan evaluation are reported but
// not counted as check time.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "backend/lowering/auto_order.h"
#include "backend/lowering/program_check.h"
#include "semantics/checker/checker.h"
#include "semantics/interpreter.h"

using namespace nns;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Run {
  bool ok = false;
  double elaborate_ms = 0, plan_ms = 0, check_ms = 0;
  double program_ms = -1;  // program verification; < 0: not run
  bool program_ok = false;
  sema::check::CheckResult result;
  std::string error;
};

Run run_once(const std::string& path, const std::string& config, const std::string& plan_name, int64_t gpus, bool verify_program = false) {
  Run r;
  front::SourceManager sources;
  front::DiagnosticEngine diags(sources);
  auto t0 = std::chrono::steady_clock::now();
  sema::Interpreter in(sources, diags, sema::EvalOptions{config, {}});
  if (!in.parse(path) || !in.evaluate()) {
    for (const auto& d : diags.all()) r.error += diags.format(d, false);
    return r;
  }
  r.elaborate_ms = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  sema::Plan plan;
  bool ok = in.evaluate_plan(plan_name, gpus, plan);
  if (ok) backend::choose_auto_orders(in.graph(), plan);  // as nns check does
  r.plan_ms = ms_since(t1);
  if (!ok) {
    for (const auto& d : diags.all()) r.error += diags.format(d, false);
    return r;
  }
  sema::check::CheckOptions opts;
  opts.sources = &sources;
  opts.timeout_ms = 60000;
  // (Memory is not part of the Z3 encoding: the capacity check replays the
  // lowered programs, backend/lowering/memory_check.h.)
  if (const auto& t = in.train()) opts.micro_batches = t->micro_batches;
  r.result = sema::check::check_plan(in.graph(), plan, opts);
  r.check_ms = r.result.total_ms();
  r.ok = true;
  if (verify_program && r.result.verdict == sema::check::Verdict::Legal) {
    backend::ProgramCheck pc = backend::verify_programs(in.graph(), plan, 1);
    r.program_ms = pc.ms;
    r.program_ok = pc.ok;
  }
  return r;
}

struct Scenario {
  const char* label;
  const char* example;
  const char* plan;
  int64_t gpus;
  std::string base;                 // config the sizes extend
  std::string symbolic;             // entries of the symbolic config
  std::vector<std::string> concrete;  // entries of each brute-force config
};

std::string verdict_text(const Run& r) {
  if (!r.ok) return "error";
  switch (r.result.verdict) {
    case sema::check::Verdict::Legal: return r.result.symbolic ? "legal, all sizes" : "legal";
    case sema::check::Verdict::Illegal: return "illegal";
    case sema::check::Verdict::Unknown: return "unknown";
  }
  return "?";
}

void report(const char* what, const Run& r) {
  std::printf("    %-26s %-17s elaborate %8.1f ms  plan %8.1f ms  check %8.1f ms (", what, verdict_text(r).c_str(), r.elaborate_ms, r.plan_ms,
              r.check_ms);
  for (size_t i = 0; i < r.result.pass_ms.size(); ++i)
    std::printf("%s%s %.1f", i ? ", " : "", r.result.pass_ms[i].first.c_str(), r.result.pass_ms[i].second);
  std::printf(")\n");
  if (r.program_ms >= 0)
    std::printf("    %-26s program verification (lowered per-rank programs, all ranks): %s, %.1f ms; check + program %.1f ms\n", "",
                r.program_ok ? "verified" : "WRONG", r.program_ms, r.check_ms + r.program_ms);
  if (r.ok)
    std::printf("    %-26s directives %d, tracked %d, z3 vars %d, size obligations %d, ground checks %lld\n", "", r.result.stats.directives,
                r.result.stats.tracked, r.result.stats.variables, r.result.stats.obligations, (long long)r.result.stats.ground_checks);
  if (!r.error.empty()) std::printf("%s", r.error.c_str());
  for (const auto& d : r.result.diagnostics) std::printf("      %s\n", d.message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t only = argc > 1 ? std::atoll(argv[1]) : 0;
  const std::string src = NNS_SOURCE_DIR;
  std::vector<std::string> gpt_sizes, swin32_sizes, swin1024_sizes;
  for (int b : {8, 16, 24, 32})
    for (int s : {256, 512, 1024, 2048, 4096}) gpt_sizes.push_back("batch = " + std::to_string(b) + "  seq = " + std::to_string(s));
  for (int b : {8, 16, 24, 32, 40, 48, 56, 64}) swin32_sizes.push_back("batch = " + std::to_string(b));
  for (int b : {256, 512}) swin1024_sizes.push_back("batch = " + std::to_string(b));
  const std::string gpt_sym = "batch = symbolic(8, \"batch % 8 == 0\")  seq = symbolic(2048, \"seq % 128 == 0\")";
  std::vector<Scenario> scenarios = {
      {"gpt.nns megatron, gpt3_1_3b with 32 heads", "gpt.nns", "megatron", 32, "gpt3_1_3b { heads = 32 }", gpt_sym, gpt_sizes},
      {"gpt.nns megatron, gpt3_1_3b with 1024 heads", "gpt.nns", "megatron", 1024, "gpt3_1_3b { heads = 1024 }", gpt_sym, gpt_sizes},
      {"swin.nns coshard, swin_32gpu", "swin.nns", "coshard", 32, "swin_32gpu { }", "batch = symbolic(32, \"batch % 8 == 0\")", swin32_sizes},
      {"swin.nns coshard, swin_32gpu with batch 256", "swin.nns", "coshard", 1024, "swin_32gpu { batch = 256 }",
       "batch = symbolic(256, \"batch % 256 == 0\")", swin1024_sizes},
  };
  std::printf("checker benchmark (encoding + solving; elaboration and plan evaluation shown apart)\n");
  for (const Scenario& s : scenarios) {
    if (only && s.gpus != only) continue;
    // The example with the scenario's configs appended.
    std::string text = read(src + "/examples/" + s.example);
    std::string base_name = s.base.substr(0, s.base.find(' '));
    text += "\nconfig bench_base extends " + s.base + "\n";
    text += "config bench_sym extends bench_base { " + s.symbolic + " }\n";
    for (size_t i = 0; i < s.concrete.size(); ++i) text += "config bench_" + std::to_string(i) + " extends bench_base { " + s.concrete[i] + " }\n";
    std::string path = "/tmp/nns_bench_checker_" + std::to_string(getpid()) + ".nns";
    std::ofstream(path) << text;
    std::printf("\n%s, plan %s on %lld devices\n", s.label, s.plan, (long long)s.gpus);
    Run witness = run_once(path, "bench_base", s.plan, s.gpus, true);
    report("concrete (preset sizes)", witness);
    Run sym = run_once(path, "bench_sym", s.plan, s.gpus);
    report(("symbolic: " + s.symbolic.substr(0, s.symbolic.find('='))).c_str(), sym);
    double total_check = 0, total_all = 0;
    int legal = 0;
    for (size_t i = 0; i < s.concrete.size(); ++i) {
      Run r = run_once(path, "bench_" + std::to_string(i), s.plan, s.gpus);
      total_check += r.check_ms;
      total_all += r.elaborate_ms + r.plan_ms + r.check_ms;
      legal += r.ok && r.result.verdict == sema::check::Verdict::Legal;
      if (!r.ok || r.result.verdict != sema::check::Verdict::Legal) report(s.concrete[i].c_str(), r);
    }
    std::printf("    brute force over %zu concrete sizes: %d legal; checks %.1f ms in all (%.1f ms each), with elaboration and plan "
                "evaluation %.1f ms\n",
                s.concrete.size(), legal, total_check, total_check / s.concrete.size(), total_all);
    std::printf("    symbolic proof (one elaboration + one check, every admissible size): %.1f ms\n", sym.elaborate_ms + sym.plan_ms + sym.check_ms);
    unlink(path.c_str());
  }
  return 0;
}
