// Tests of checkpoints read through a weights map (backend/runtime/
// weight_import.h) on small hand-made files: slices and transposes against
// values written out by hand, dtype conversion, sharded indexes, every
// refusal, and export inverting import exactly.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend/runtime/cpu/half_bits.h"
#include "backend/runtime/weight_import.h"
#include "temp_dir.h"

namespace nns::backend::test {

namespace {

namespace fs = std::filesystem;

StTensor f32(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
  return f32_tensor(name, shape, v.data(), v.size());
}

StTensor bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  StTensor t{name, "BF16", shape, std::vector<uint8_t>(v.size() * 2)};
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t b = cpu::bf16_bits(v[i]);
    t.data[2 * i] = static_cast<uint8_t>(b & 0xff);
    t.data[2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  return t;
}

sema::WeightTake take(const std::string& param, const std::string& source, int axis = -1, int64_t start = 0,
                      int64_t end = 0, bool transpose = false) {
  sema::WeightTake t;
  t.param = param;
  t.source = source;
  t.axis = axis;
  t.start = start;
  t.end = end;
  t.transpose = transpose;
  return t;
}

std::vector<float> values(const SafetensorsFile& f, const std::string& name) {
  const StTensor* t = f.find(name);
  REQUIRE(t != nullptr);
  std::vector<float> out(t->data.size() / 4);
  std::memcpy(out.data(), t->data.data(), t->data.size());
  return out;
}

// A GPT-2-like fused c_attn [in = 2, out = 6] with bias [6]: q, k, v are its
// column blocks, transposed into [out = 2, in = 2].
sema::WeightMapSpec fused_map() {
  sema::WeightMapSpec m;
  m.name = "test";
  const char* q[] = {"wq", "wk", "wv"};
  for (int j = 0; j < 3; ++j) {
    m.takes.push_back(take(q[j], "c_attn.weight", 1, 2 * j, 2 * j + 2, true));
    m.takes.push_back(take(std::string("b") + q[j][1], "c_attn.bias", 0, 2 * j, 2 * j + 2));
  }
  return m;
}

std::vector<ModelParam> fused_params() {
  std::vector<ModelParam> p;
  for (const char* n : {"wq", "wk", "wv"}) p.push_back({n, {2, 2}, false});
  for (const char* n : {"bq", "bk", "bv"}) p.push_back({n, {2}, false});
  return p;
}

}  // namespace

TEST_CASE("weights map: wildcard patterns", "[weights]") {
  CHECK(wildcard_match("h.*.attn.bias", "h.11.attn.bias"));
  CHECK_FALSE(wildcard_match("h.*.attn.bias", "h.11.attn.c_attn.bias"));
  CHECK(wildcard_match("*", ""));
  CHECK(wildcard_match("a?c", "abc"));
  CHECK_FALSE(wildcard_match("a?c", "ac"));
  CHECK(wildcard_match("*.weight", "x.y.weight"));
  CHECK_FALSE(wildcard_match("*.weight", "x.y.weights"));
}

TEST_CASE("weights map: q, k, v cut from a fused Conv1D tensor and transposed", "[weights]") {
  TempDir d;
  // c_attn.weight[r][c] = 10 r + c (r: input feature, c: output column).
  std::vector<float> w(12), b(6);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 6; ++c) w[static_cast<size_t>(r * 6 + c)] = static_cast<float>(10 * r + c);
  for (int c = 0; c < 6; ++c) b[static_cast<size_t>(c)] = static_cast<float>(100 + c);
  write_safetensors_atomic(d.file("model.safetensors"), {f32("c_attn.weight", {2, 6}, w), f32("c_attn.bias", {6}, b)});
  ExternalCheckpoint ckpt(d.path.string());  // a folder holding model.safetensors
  ImportedWeights got = import_weights(fused_map(), ckpt, fused_params(), false);
  // wk = c_attn[:, 2:4]^T: row o (output) holds column 2 + o over the inputs.
  CHECK(values(got.tensors, "wk") == std::vector<float>{2, 12, 3, 13});
  CHECK(values(got.tensors, "wq") == std::vector<float>{0, 10, 1, 11});
  CHECK(values(got.tensors, "wv") == std::vector<float>{4, 14, 5, 15});
  CHECK(values(got.tensors, "bv") == std::vector<float>{104, 105});
  CHECK(got.kept.empty());

  // Export inverts it: the fused tensors come back bit for bit.
  std::vector<std::string> notes;
  std::vector<StTensor> back = export_weights(fused_map(), got.tensors, "got", notes);
  REQUIRE(back.size() == 2);
  SafetensorsFile f;
  f.tensors = back;
  CHECK(values(f, "c_attn.weight") == w);
  CHECK(values(f, "c_attn.bias") == b);
  CHECK(notes.empty());
}

TEST_CASE("weights map: BF16 shards through an index, an optional prefix, ignored tensors", "[weights]") {
  TempDir d;
  const std::vector<float> a = {1.5f, -2.0f, 0.25f, 3.0f};  // exact in bf16
  write_safetensors_atomic(d.file("s1.safetensors"), {bf16("transformer.a.weight", {2, 2}, a)});
  write_safetensors_atomic(d.file("s2.safetensors"),
                           {f32("transformer.b", {3}, {7, 8, 9}), f32("transformer.mask", {1}, {1})});
  std::ofstream(d.file("model.safetensors.index.json"))
      << R"({"metadata": {"total_size": 28}, "weight_map": {"transformer.a.weight": "s1.safetensors", "transformer.b": "s2.safetensors", "transformer.mask": "s2.safetensors"}})";
  ExternalCheckpoint ckpt(d.file("model.safetensors.index.json"));
  CHECK(ckpt.files() == 2);
  sema::WeightMapSpec m;
  m.name = "t";
  m.prefixes = {"transformer."};
  m.ignored = {"mask"};
  m.takes = {take("a", "a.weight"), take("b2", "b", 0, 1, 3)};
  ImportedWeights got = import_weights(m, ckpt, {{"a", {2, 2}, false}, {"b2", {2}, false}}, false);
  CHECK(values(got.tensors, "a") == a);
  CHECK(values(got.tensors, "b2") == std::vector<float>{8, 9});
  CHECK(got.ignored == std::vector<std::string>{"transformer.mask"});
  // Export cannot write b from its elements 1..2 alone (a gap at 0)...
  std::vector<std::string> notes;
  CHECK_THROWS_WITH(export_weights(m, got.tensors, "got", notes),
                    Catch::Contains("do not tile it along one axis from 0"));
  // ...and writes a cut from 0 with the model's extent, saying so.
  m.takes[1] = take("b2", "b", 0, 0, 2);
  got = import_weights(m, ckpt, {{"a", {2, 2}, false}, {"b2", {2}, false}}, false);
  CHECK(values(got.tensors, "b2") == std::vector<float>{7, 8});
  std::vector<StTensor> back = export_weights(m, got.tensors, "got", notes);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("'b' is written with the model's 2 along axis 0"));
  REQUIRE(back.size() == 2);
  CHECK(back[1].shape == std::vector<int64_t>{2});
}

TEST_CASE("weights map: every refusal names what is wrong", "[weights]") {
  TempDir d;
  write_safetensors_atomic(d.file("m.safetensors"), {f32("x", {2, 3}, {1, 2, 3, 4, 5, 6}), f32("extra", {1}, {0})});
  ExternalCheckpoint ckpt(d.file("m.safetensors"));
  const std::vector<ModelParam> params = {{"p", {3, 2}, false}, {"q", {2}, false}};
  auto refused = [&](const sema::WeightMapSpec& m, bool partial, const std::string& text) {
    try {
      import_weights(m, ckpt, params, partial);
      FAIL("accepted; expected: " << text);
    } catch (const SafetensorsError& e) {
      CHECK_THAT(e.what(), Catch::Contains(text));
    }
  };
  sema::WeightMapSpec m;
  m.name = "t";
  m.ignored = {"extra"};
  m.takes = {take("pp", "x")};
  refused(m, false, "the model has no parameter 'pp' (did you mean 'p'?)");
  m.takes = {take("p", "y")};
  refused(m, false, "has no tensor 'y' for parameter 'p'");
  m.takes = {take("p", "x")};
  refused(m, false, "'x' gives [2, 3] but parameter 'p' is [3, 2]");
  m.takes = {take("p", "x", -1, 0, 0, true)};
  refused(m, false, "gives no tensor for 1 parameter(s) of the model: q");
  m.takes = {take("p", "x", -1, 0, 0, true), take("q", "x", 1, 2, 4)};
  refused(m, false, "slice [2, 4) of axis 1 is outside 'x' [2, 3]");
  m.takes = {take("p", "x", -1, 0, 0, true), take("q", "x", 0, 0, 1, true)};
  refused(m, false, "'x' gives [3, 1] but parameter 'q' is [2]");
  m.ignored.clear();
  m.takes = {take("p", "x", -1, 0, 0, true)};
  refused(m, true, "holds 1 tensor(s) that weights 't' reads nowhere: extra");
  // --init-partial: q keeps its initializer, and is listed.
  m.ignored = {"ext*"};
  ImportedWeights got = import_weights(m, ckpt, params, true);
  CHECK(got.kept == std::vector<std::string>{"q"});
  CHECK(values(got.tensors, "p") == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("weights map: an index may only name files beside it", "[weights]") {
  TempDir d;
  std::ofstream(d.file("model.safetensors.index.json")) << R"({"weight_map": {"a": "../elsewhere.safetensors"}})";
  CHECK_THROWS_WITH(ExternalCheckpoint(d.path.string()), Catch::Contains("shards must be files in the index's folder"));
  std::ofstream(d.file("model.safetensors.index.json"), std::ios::trunc) << R"({"weight_map": [1]})";
  CHECK_THROWS_WITH(ExternalCheckpoint(d.path.string()), Catch::Contains("\"weight_map\""));
}

}  // namespace nns::backend::test
