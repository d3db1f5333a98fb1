// Pretrained weights in another layout: `nns run --init CKPT --init-map NAME
// [--init-partial]` and `nns ckpt export CKPT FILE --map NAME -o OUT`, both
// through a `weights NAME` block of the model's file (semantics/weight_map.h,
// backend/runtime/weight_import.h).
#include "driver/weights.h"

#include <cstdio>
#include <iostream>

#include "backend/runtime/checkpoint_store.h"
#include "backend/runtime/weight_import.h"
#include "driver/commands.h"
#include "driver/setup_notice.h"

namespace nns::driver {

namespace {

// The model's parameters as the importer checks them.
std::vector<backend::ModelParam> model_params(sema::Graph& g) {
  std::vector<backend::ModelParam> out;
  for (int p : g.params()) out.push_back(backend::ModelParam{g.tensor(p).name, g.tensor(p).shape, g.tensor(p).buffer});
  return out;
}

// Runs `body` (which reads or writes checkpoints) and turns its errors into
// the exit code: a problem of the map, or of the checkpoint against it, is
// printed located at the block's line with a caret; any other checkpoint
// error as "nns: error: ...". Both are bad input (65).
template <class Body>
int guarded(Pipeline& p, Body body) {
  try {
    body();
  } catch (const backend::WeightMapError& e) {
    p.diags.error(e.loc, e.what());
    p.diags.print(std::cerr, front::want_colour());
    p.diags.clear();
    return kExitBadInput;
  } catch (const backend::SafetensorsError& e) {
    std::cerr << "nns: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitOk;
}

void list_kept(const std::vector<std::string>& kept) {
  if (kept.empty()) return;
  std::printf("nns: --init-partial: %zu parameter(s) keep their initializers:\n", kept.size());
  for (const std::string& k : kept) std::printf("  %s\n", k.c_str());
}

// Runs weights block `name` into `map`: kExitOk, else its errors printed
// and 64 for an unknown name (a usage error, as an unknown plan) or 65.
int evaluate_map(Pipeline& p, const std::string& name, sema::WeightMapSpec& map) {
  if (p.interp->evaluate_weights(name, map)) return kExitOk;
  p.diags.print(std::cerr, front::want_colour());
  p.diags.clear();
  return p.interp->failure() == sema::Interpreter::Failure::UnknownPlan ? kExitUsage : kExitBadInput;
}

}  // namespace

int check_weight_maps(Pipeline& p) {
  const std::vector<backend::ModelParam> params = model_params(p.graph());
  bool ok = true;
  for (const std::string& name : p.interp->weight_map_names()) {
    sema::WeightMapSpec map;
    if (int rc = evaluate_map(p, name, map); rc != kExitOk) return rc;
    for (const backend::WeightMapError& e : backend::unknown_parameters(map, params)) {
      p.diags.error(e.loc, e.what());
      ok = false;
    }
  }
  p.diags.print(std::cerr, front::want_colour());
  p.diags.clear();
  return ok ? kExitOk : kExitBadInput;
}

int import_init_weights(Pipeline& p, const RunOptions& r) {
  if (r.init_partial && r.init.empty()) return usage_error("--init-partial needs --init FILE");
  if (r.init_map.empty() && r.init_partial) {
    // The model's own names, some left out on purpose: read once here, so
    // that the names left out are listed once.
    return guarded(p, [&] {
      auto f = std::make_shared<backend::SafetensorsFile>(backend::read_checkpoint(r.init));
      std::vector<std::string> kept;
      for (const backend::ModelParam& m : model_params(p.graph()))
        if (!m.buffer && !f->find(m.name)) kept.push_back(m.name);
      list_kept(kept);
      p.init_weights = std::move(f);
    });
  }
  if (r.init_map.empty()) return kExitOk;
  if (r.init.empty())
    return usage_error("--init-map " + r.init_map + " needs --init CHECKPOINT (the file or folder in that layout)");
  sema::WeightMapSpec map;
  if (int rc = evaluate_map(p, r.init_map, map); rc != kExitOk) return rc;
  return guarded(p, [&] {
    SetupNotice notice("reading " + r.init + " through weights " + map.name);
    backend::ExternalCheckpoint ckpt(r.init);
    backend::ImportedWeights w = backend::import_weights(map, ckpt, model_params(p.graph()), r.init_partial);
    std::printf("nns: --init %s through weights %s: %zu parameter(s) from %zu tensor(s) in %d file(s)\n",
                r.init.c_str(), map.name.c_str(), w.tensors.tensors.size(), ckpt.names().size(), ckpt.files());
    list_kept(w.kept);
    if (!w.ignored.empty())
      std::printf("nns: %zu tensor(s) of %s ignored by the map (ignore(...))\n", w.ignored.size(), r.init.c_str());
    std::fflush(stdout);
    p.init_weights = std::make_shared<const backend::SafetensorsFile>(std::move(w.tensors));
  });
}

// nns ckpt export CKPT FILE.nns --map NAME [--config C] [--set K=V] -o OUT
int cmd_ckpt_export(const Args& a) {
  if (a.positional.size() != 3 || a.init_map.empty() || a.output.empty())
    return usage_error(
        "usage: nns ckpt export CKPT FILE.nns --map NAME [--config C] -o OUT.safetensors (CKPT: an nns checkpoint file or --save folder)");
  Args model = a;
  model.positional = {a.positional[2]};
  PipelineOptions o;
  if (int rc = pipeline_options(model, /*check=*/true, Stage::Graph, o); rc != kExitOk) return rc;
  Pipeline p;
  if (int rc = run_pipeline(o, p); rc != kExitOk) return rc;
  sema::WeightMapSpec map;
  if (int rc = evaluate_map(p, a.init_map, map); rc != kExitOk) return rc;
  return guarded(p, [&] {
    backend::SafetensorsFile f = backend::read_checkpoint(a.positional[1]);
    std::vector<std::string> notes;
    std::vector<backend::StTensor> out = backend::export_weights(map, f, a.positional[1], notes);
    // "format": "pt" is what Hugging Face's loaders look for in a safetensors file.
    backend::write_safetensors_atomic(a.output, out, {{"format", "pt"}});
    std::printf("nns: wrote %s: %zu tensor(s) in the layout of weights %s (F32)\n", a.output.c_str(), out.size(),
                map.name.c_str());
    for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  });
}

}  // namespace nns::driver
