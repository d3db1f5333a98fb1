// Megatron's structure found from the graph (search_structure.cpp): the
// shipped Transformers have it, whatever their names (GPT's mlp.fc1/fc2,
// Llama's SwiGLU gate/up/down, BERT, T5's wi/wo); models without an
// attention followed by a column/row MLP pair do not (ResNet, the MLP
// lesson, the U-Net, whose attention is followed by convolutions).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "backend/planner/search.h"
#include "frontend/diagnostics.h"
#include "frontend/source.h"
#include "semantics/interpreter.h"

using namespace nns::planner;

namespace {

MegatronStructure structure_of(const std::string& path, const std::string& config, SearchModel* out = nullptr) {
  nns::front::SourceManager sources;
  nns::front::DiagnosticEngine diags{sources};
  nns::sema::EvalOptions eo;
  eo.stdlib_dirs = {NNS_STDLIB_DIR};
  eo.config = config;
  nns::sema::Interpreter interp(sources, diags, eo);
  REQUIRE(interp.parse(path));
  REQUIRE(interp.evaluate());
  SearchModel m = build_search_model(interp.graph(), interp.new_plan("t", 2));
  MegatronStructure s = m.megatron;
  if (out) *out = std::move(m);
  return s;
}

// The op whose name ends with `suffix` and its Megatron-layout choice's
// identifier ("" when replicated).
std::string layout_of(const SearchModel& m, const std::string& suffix) {
  for (size_t i = 0; i < m.ops.size(); ++i) {
    const std::string& n = m.ops[i].name;
    if (n.size() < suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const int c = m.megatron.choice[i];
    return c < 0 ? "" : m.ops[i].choices[c].id;
  }
  FAIL("no op named *" << suffix);
  return "";
}

}  // namespace

TEST_CASE("Megatron structure: found in GPT with Megatron-LM's layout") {
  SearchModel m;
  MegatronStructure s = structure_of("examples/gpt.nns", "tiny", &m);
  CHECK(s.found());
  CHECK(s.blocks == s.attention_ops);
  CHECK(s.blocks >= 2);
  CHECK(layout_of(m, "blocks.0.attn.attention#0") == "h");  // heads
  CHECK(layout_of(m, "blocks.0.mlp.fc1.linear#0") == "n");  // column parallel
  CHECK(layout_of(m, "blocks.0.mlp.gelu#0") != "");         // the hidden features
  CHECK(layout_of(m, "blocks.0.mlp.fc2.linear#0") == "k");  // row parallel
  CHECK(layout_of(m, "blocks.0.ln1.layer_norm#0") == "");   // the rest replicated
}

TEST_CASE("Megatron structure: found in Llama's SwiGLU blocks, which no name pattern of GPT's matches") {
  SearchModel m;
  MegatronStructure s = structure_of("examples/llama.nns", "tiny", &m);
  CHECK(s.found());
  CHECK(layout_of(m, "blocks.0.mlp.gate.linear#0") == "n");
  CHECK(layout_of(m, "blocks.0.mlp.up.linear#0") == "n");
  CHECK(layout_of(m, "blocks.0.mlp.down.linear#0") == "k");
}

TEST_CASE("Megatron structure: found in BERT and T5") {
  CHECK(structure_of("examples/bert.nns", "tiny").found());
  CHECK(structure_of("examples/t5.nns", "tiny").found());
}

TEST_CASE("Megatron structure: absent without attention followed by a column/row MLP") {
  SearchModel m;
  MegatronStructure resnet = structure_of("examples/resnet.nns", "tiny", &m);
  CHECK_FALSE(resnet.found());
  CHECK(resnet.attention_ops == 0);
  for (int c : resnet.choice) CHECK(c == -1);  // no layout to cost
  MegatronStructure mlp = structure_of("examples/01_mlp.nns", "small");
  CHECK_FALSE(mlp.found());
  CHECK(mlp.mlp_pairs == 1);  // the pair alone is not Megatron's structure
  CHECK(mlp.attention_ops == 0);
  MegatronStructure unet = structure_of("examples/unet.nns", "tiny");
  CHECK_FALSE(unet.found());
  CHECK(unet.attention_ops > 0);  // attention, then convolutions: no MLP of linears after it
  CHECK(unet.describe().find("no attention op followed by an MLP") != std::string::npos);
}
