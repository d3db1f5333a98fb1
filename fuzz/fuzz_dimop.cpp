// fuzz_dimop: the dimop annotation language (semantics/dimop.h) on arbitrary
// text. The first line of the input is the annotation: it is parsed,
// normalised and printed, its canonical text must parse back to itself,
// and when it normalises it is bound as `nns dimop 'ANNOTATION'` binds it
// (placeholder sizes) and its transform space enumerated. When the input
// has more lines, their bytes give the inputs' dim sizes (0..8) for a
// second binding with concrete shapes (`--shapes`), so size checks run too.
// A DimopError is the expected outcome (exit 65 in the CLI); its column
// must lie in the text it points into.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "semantics/dimop.h"

namespace {

using namespace nns::sema;

void check_column(const DimopError& e, size_t text_size, const char* stage) {
  if (e.column > text_size)
    nns::fuzz::internal_error("fuzz_dimop", std::string(stage) + " error at column " + std::to_string(e.column) + " of a " +
                                                std::to_string(text_size) + "-byte text: " + e.message);
}

// Every choice described, and every (input, dim) looked up as a plan's
// trans(op, idx = i, dim = d) does.
void enumerate(const BoundAnno& bound) {
  for (bool value : {false, true})
    for (const TransformChoice& c : transform_space(bound, value)) (void)c.describe();
  for (size_t i = 0; i < bound.anno.inputs.size(); ++i)
    for (size_t d = 0; d <= bound.anno.inputs[i].dims.size(); ++d)
      if (auto c = choice_for(bound, static_cast<int>(i), static_cast<int>(d))) (void)c->describe();
}

void run(std::string_view input) {
  const size_t nl = input.find('\n');
  const std::string_view text = input.substr(0, nl);
  const std::string_view sizes = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);

  OpAnno anno;
  try {
    (void)parse_annotation(text).to_string();
    anno = parse_normalized(text);
  } catch (const DimopError& e) {
    check_column(e, text.size(), "parse");
    return;
  }
  const std::string canonical = anno.to_string();
  try {
    if (parse_normalized(canonical).to_string() != canonical)
      nns::fuzz::internal_error("fuzz_dimop", "'" + canonical + "' (from '" + std::string(text) + "') prints differently when parsed again");
  } catch (const DimopError& e) {
    nns::fuzz::internal_error("fuzz_dimop", "the canonical text '" + canonical + "' of '" + std::string(text) + "' does not parse: " + e.message);
  }

  // As `nns dimop` without --shapes: placeholder sizes for everything.
  try {
    std::map<std::string, int64_t> given;
    for (const auto* side : {&anno.inputs, &anno.outputs})
      for (const OperandAnno& op : *side)
        for (const DimAnno& d : op.dims)
          for (const DimId& id : d.ids)
            if (!id.numeric) given[id.name] = 2;
    enumerate(bind(anno, placeholder_shapes(anno), given));
  } catch (const DimopError& e) {
    check_column(e, canonical.size(), "bind (placeholder shapes)");
  }

  // As `nns dimop --shapes`: the placeholder ranks, sizes from the input.
  if (sizes.empty()) return;
  std::vector<InputShape> shapes = placeholder_shapes(anno);
  size_t k = 0;
  for (InputShape& s : shapes)
    for (int64_t& dim : s.shape) dim = static_cast<unsigned char>(sizes[k++ % sizes.size()]) % 9;
  try {
    enumerate(bind(anno, shapes));
  } catch (const DimopError& e) {
    check_column(e, canonical.size(), "bind (shapes)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nns::fuzz::silence_streams();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nns::fuzz::run_guarded("fuzz_dimop", [&] { run(std::string_view(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
