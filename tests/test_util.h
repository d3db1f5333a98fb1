// Shared setup of the Catch2 tests that elaborate a .nns program: the
// sources, diagnostics and interpreter an elaboration needs (kept together:
// the interpreter refers to the other two for as long as its graph is used),
// temporary .nns files written from a test's text, and a training model.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "frontend/diagnostics.h"
#include "semantics/autograd.h"
#include "semantics/interpreter.h"
#include "semantics/plan.h"

namespace nns::test {

// Writes `text` to /tmp/nns_<tag>_<pid>_<name>.nns and returns the path.
inline std::string write_temp(const std::string& tag, const std::string& name, const std::string& text) {
  std::string path = "/tmp/nns_" + tag + "_" + std::to_string(getpid()) + "_" + name + ".nns";
  std::ofstream(path) << text;
  return path;
}

// One program elaborated with a config preset ("" for the file's first).
struct Elaboration {
  front::SourceManager sources;
  front::DiagnosticEngine diags{sources};
  std::unique_ptr<sema::Interpreter> interp;

  explicit Elaboration(const std::string& config = "")
      : interp(std::make_unique<sema::Interpreter>(sources, diags, sema::EvalOptions{config, {}})) {}
  Elaboration(const Elaboration&) = delete;
  Elaboration& operator=(const Elaboration&) = delete;

  // Parses and evaluates the file; false if either reported an error (see errors()).
  bool load(const std::string& path) { return interp->parse(path) && interp->evaluate(); }
  // Evaluates plan `name` for `ngpus` devices into `out`.
  bool evaluate_plan(const std::string& name, int64_t ngpus, sema::Plan& out) {
    return interp->evaluate_plan(name, ngpus, out);
  }
  // The interpreter as a lowering's kernel elaborator (backend::LowerOptions::elaborate).
  auto elaborator() {
    return [this](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
                  const std::map<std::string, int64_t>& div,
                  sema::Graph& local) { return interp->instantiate_op(node, ins, outs, div, local); };
  }
  // The interpreter's elaboration key (backend::LowerOptions::elaboration_key).
  auto elaboration_key() {
    return
        [this](int node, const std::vector<sema::Shape>& ins, const std::vector<sema::Shape>& outs,
               const std::map<std::string, int64_t>& div) { return interp->instantiation_key(node, ins, outs, div); };
  }
  // Every diagnostic so far, formatted without colour.
  std::string errors() const {
    std::string s;
    for (const auto& d : diags.all()) s += diags.format(d, false);
    return s;
  }
};

// A .nns file of the source tree (`root`: its top, the tests' NNS_SOURCE_DIR)
// elaborated with a config preset, and one of its plans evaluated for
// `devices` devices (no plan name: the implicit plan of a run without
// --plan); a test fails here if either does not evaluate.
struct PlannedElaboration : Elaboration {
  sema::Plan plan;

  PlannedElaboration(const std::string& root, const std::string& file, const std::string& config,
                     const std::string& plan_name, int64_t devices)
      : Elaboration(config) {
    REQUIRE(load(root + "/" + file));
    if (plan_name.empty())
      plan = sema::implicit_plan(interp->graph());
    else
      REQUIRE(evaluate_plan(plan_name, devices, plan));
  }
};

// A program given as text with a train block, elaborated, and its training
// graph; a test fails here if the text does not elaborate.
struct TrainingModel : Elaboration {
  sema::TrainSpec spec;
  sema::TrainingGraphInfo info;

  TrainingModel(const std::string& tag, const std::string& text) {
    std::string path = write_temp(tag, "model", text);
    bool ok = load(path);
    std::remove(path.c_str());
    if (!ok) {
      diags.print(std::cerr, false);
      FAIL("elaboration failed");
    }
    spec = *interp->train();
    info = sema::build_training_graph(interp->graph(), spec.optimizer.kind);
  }
};

}  // namespace nns::test
