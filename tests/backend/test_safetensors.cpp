// Tests of the safetensors reader/writer (backend/safetensors.h): round
// trips, byte-exact compatibility with the reference (Rust/Python) writer,
// the atomic write, and one hand-crafted corrupt file per reader check.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "backend/runtime/safetensors.h"
#include "temp_dir.h"

namespace nns::backend::test {

namespace {

namespace fs = std::filesystem;

// A file as the reference writer lays it out: 8-byte LE length, the JSON
// (space-padded to a multiple of 8 when `pad`), then `data`.
std::string st_bytes(std::string json, const std::string& data, bool pad = true) {
  if (pad) json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int k = 0; k < 8; ++k) out[k] = static_cast<char>(uint64_t{json.size()} >> (8 * k));
  return out + json + data;
}

std::string length_prefix(uint64_t n) {
  std::string out(8, '\0');
  for (int k = 0; k < 8; ++k) out[k] = static_cast<char>(n >> (8 * k));
  return out;
}

StTensor make(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
  StTensor t{name, dtype, std::move(shape), {}};
  size_t n = dtype_size(dtype);
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  for (size_t i = 0; i < n; ++i) t.data.push_back(static_cast<uint8_t>(i * 7 + name.size()));
  return t;
}

// Reads `bytes` as a file and requires a SafetensorsError naming the file
// and containing every one of `parts`.
void expect_read_error(const std::string& bytes, std::initializer_list<const char*> parts) {
  TempDir dir;
  const std::string path = dir.file("corrupt.safetensors");
  spit(path, bytes);
  try {
    read_safetensors(path);
    FAIL("no error for a corrupt file");
  } catch (const SafetensorsError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(path) != std::string::npos);
    for (const char* p : parts) CHECK(msg.find(p) != std::string::npos);
  }
}

const char* kA = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string k8(8, 'x'), k12(12, 'x');

}  // namespace

TEST_CASE("safetensors: round trip of dtypes and shapes", "[backend][safetensors]") {
  TempDir dir;
  std::vector<StTensor> in = {
      make("w.f32", "F32", {2, 3}),    make("w.f16", "F16", {4}), make("w.bf16", "BF16", {2, 2}),
      make("w.f64", "F64", {3}),       make("w.i8", "I8", {5}),   make("w.i16", "I16", {1, 3}),
      make("w.i32", "I32", {1, 1, 1}), make("w.i64", "I64", {2}), make("w.u8", "U8", {7}),
      make("w.bool", "BOOL", {3}),     make("scalar", "F32", {}), make("empty", "F32", {0, 3}),
      make("empty.i64", "I64", {0}),   make("z", "U16", {1})};
  REQUIRE(in[10].data.size() == 4);  // shape [] is one element
  const std::string path = dir.file("model.safetensors");
  write_safetensors_atomic(path, in);
  SafetensorsFile out = read_safetensors(path);
  REQUIRE(out.tensors.size() == in.size());
  CHECK(out.metadata.empty());
  for (const StTensor& t : in) {
    INFO(t.name);
    const StTensor* r = out.find(t.name);
    REQUIRE(r != nullptr);
    CHECK(r->dtype == t.dtype);
    CHECK(r->shape == t.shape);
    CHECK(r->data == t.data);
  }
  CHECK(out.find("absent") == nullptr);
  // Data-offset order, which the writer makes decreasing alignment: every
  // tensor starts at a multiple of its element size.
  size_t offset = 0;
  for (const StTensor& t : out.tensors) {
    INFO(t.name);
    CHECK(offset % dtype_size(t.dtype) == 0);
    offset += t.data.size();
  }
  CHECK(slurp(path).size() % 8 == offset % 8);  // header padded to 8
}

TEST_CASE("safetensors: metadata round trip, escapes and non-ASCII", "[backend][safetensors]") {
  TempDir dir;
  const std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"quote\"back\\slash", "line\nbreak\ttab\x01 ctl"},
      {"unicode", "é中😀"},
      {"", ""}};
  const std::string path = dir.file("m.safetensors");
  write_safetensors_atomic(path, {make("na\"me\n\u00e9", "F32", {1})}, meta);
  SafetensorsFile out = read_safetensors(path);
  CHECK(out.metadata == meta);
  REQUIRE(out.tensors.size() == 1);
  CHECK(out.tensors[0].name == "na\"me\n\u00e9");
  CHECK(slurp(path).find(R"("line\nbreak\ttab\u0001 ctl")") != std::string::npos);  // as serde_json
}

TEST_CASE("safetensors: deterministic bytes", "[backend][safetensors]") {
  TempDir dir;
  std::vector<StTensor> a = {make("b", "F32", {2}), make("a", "F32", {3}), make("c", "I8", {5}),
                             make("d", "F64", {1})};
  std::vector<StTensor> b = {a[3], a[2], a[0], a[1]};  // same tensors, other order
  write_safetensors_atomic(dir.file("1"), a, {{"k", "v"}, {"a", "b"}});
  write_safetensors_atomic(dir.file("2"), b, {{"a", "b"}, {"k", "v"}});
  write_safetensors_atomic(dir.file("3"), a, {{"k", "v"}, {"a", "b"}});
  CHECK(slurp(dir.file("1")) == slurp(dir.file("2")));
  CHECK(slurp(dir.file("1")) == slurp(dir.file("3")));
}

TEST_CASE("safetensors: byte-compatible with the reference implementation",
          "[backend][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("ref.safetensors");
  const float ab[2] = {1.0f, 2.0f};
  std::string data(reinterpret_cast<const char*>(ab), 8);
  // What Python's safetensors.torch.save_file({"a": torch.tensor([1., 2.])})
  // writes: 54 bytes of JSON padded with two spaces to 56.
  const std::string py = length_prefix(56) + "{" + kA + "}  " + data;
  spit(path, py);
  SafetensorsFile f = read_safetensors(path);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].name == "a");
  CHECK(f.tensors[0].dtype == "F32");
  CHECK(f.tensors[0].shape == std::vector<int64_t>{2});
  CHECK(f.tensors[0].data == std::vector<uint8_t>(data.begin(), data.end()));
  write_safetensors_atomic(path, f.tensors);
  CHECK(slurp(path) == py);

  // The reference crate's own test vectors (safetensors/src/tensor.rs).
  write_safetensors_atomic(path, {});
  CHECK(slurp(path) == length_prefix(8) + "{}      ");
  write_safetensors_atomic(path, {}, {{"framework", "pt"}});
  CHECK(slurp(path) == length_prefix(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  CHECK(read_safetensors(path).metadata.at("framework") == "pt");
  StTensor attn{"attn.0", "F32", {1, 2, 3}, {}};
  for (float x : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    attn.data.insert(attn.data.end(), p, p + 4);
  }
  write_safetensors_atomic(path, {attn});
  CHECK(slurp(path) == length_prefix(64) +
                           R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" +
                           std::string(reinterpret_cast<const char*>(attn.data.data()), 24));
}

TEST_CASE("safetensors: the reader accepts any valid JSON layout", "[backend][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("h.safetensors");
  // Whitespace, header order different from data order, metadata last, no
  // padding, escapes (incl. a surrogate pair), two empty tensors at one offset.
  spit(path, st_bytes("\n{ \"b\\u0041\\u00e9\\u4e2d\\ud83d\\ude00\\/\" : { \"shape\" : [ 1 ] , "
                      "\"dtype\" : \"I32\" ,"
                      " \"data_offsets\" : [ 8 , 12 ] } ,\t" +
                          std::string(kA) +
                          R"(, "e1":{"dtype":"U8","shape":[0],"data_offsets":[8,8]},)"
                          R"( "e0":{"dtype":"U8","shape":[2,0],"data_offsets":[8,8]},)"
                          R"( "__metadata__":{"k":"v"}})",
                      k12, false));
  SafetensorsFile f = read_safetensors(path);
  REQUIRE(f.tensors.size() == 4);
  CHECK(f.tensors[0].name == "a");
  CHECK(f.tensors[1].name == "e0");
  CHECK(f.tensors[2].name == "e1");
  CHECK(f.tensors[3].name == "bA\u00e9\u4e2d\U0001F600/");
  CHECK(f.tensors[3].data.size() == 4);
  CHECK(f.metadata.at("k") == "v");
}

// fuzz_safetensors found read_f32 passing an empty tensor's null data
// pointer to memcpy (undefined behaviour, reported by UBSan).
TEST_CASE("safetensors: read_f32 of an empty and a checked tensor", "[backend][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("f.safetensors");
  spit(path, st_bytes(R"({"empty":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                      std::string("\0\0\xe0\x40", 4)));
  SafetensorsFile f = read_safetensors(path);
  CHECK(read_f32(f, "empty", {0, 4}, path).empty());
  CHECK(read_f32(f, "b", {1}, path) == std::vector<float>{7.0f});
  CHECK_THROWS_WITH(read_f32(f, "empty", {4, 0}, path), Catch::Contains("has shape [0, 4], expected [4, 0]"));
  CHECK_THROWS_WITH(read_f32(f, "c", {1}, path), Catch::Contains("missing tensor 'c'"));
}

TEST_CASE("safetensors: atomic write replaces the file and leaves no temporary",
          "[backend][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  write_safetensors_atomic(path, {make("old", "F32", {4})});
  write_safetensors_atomic(path, {make("new", "I64", {2})}, {{"step", "2"}});
  SafetensorsFile f = read_safetensors(path);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].name == "new");
  CHECK(f.metadata.at("step") == "2");
  const std::string before = slurp(path);

  // Invalid input: a clear error naming the tensor; the old file is intact.
  auto rejects = [&](StTensor t, const char* what) {
    INFO(what);
    CHECK_THROWS_WITH(
        write_safetensors_atomic(path, {make("ok", "U8", {1}), t}),
        Catch::Contains(path) && Catch::Contains("'" + t.name + "'") && Catch::Contains(what));
  };
  StTensor short_data = make("short", "F32", {2});
  short_data.data.pop_back();
  rejects(short_data, "needs 8");
  rejects(StTensor{"q", "F128", {1}, {0}}, "unknown dtype");
  rejects(StTensor{"neg", "U8", {-1}, {}}, "invalid shape");
  rejects(make("ok", "U8", {1}), "duplicate");
  rejects(make("__metadata__", "U8", {1}), "reserved");
  rejects(StTensor{"bad\xff", "U8", {1}, {0}}, "UTF-8");
  CHECK(slurp(path) == before);

  // I/O failure: the directory does not exist.
  CHECK_THROWS_WITH(write_safetensors_atomic(dir.file("no/such/dir/x.safetensors"), {}),
                    Catch::Contains("no/such/dir/x.safetensors"));

  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    INFO(e.path().string());
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
    ++entries;
  }
  CHECK(entries == 1);
}

TEST_CASE("safetensors: reader rejects unreadable and short files", "[backend][safetensors]") {
  TempDir dir;
  const std::string missing = dir.file("missing.safetensors");
  CHECK_THROWS_WITH(read_safetensors(missing),
                    Catch::Contains(missing) && Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(read_safetensors(dir.path.string()), Catch::Contains("not a regular file"));
  expect_read_error("", {"0 bytes", "too short"});
  expect_read_error(std::string("\x10\0\0\0\0", 5), {"5 bytes", "too short"});
  expect_read_error(length_prefix(1000) + "{}", {"header length 1000 exceeds the file (10 bytes)"});
  expect_read_error(length_prefix(uint64_t{1} << 40) + "{}", {"absurd"});
  expect_read_error(length_prefix(~uint64_t{0}) + "{}", {"absurd"});
  expect_read_error(length_prefix(100'000'001), {"absurd"});
}

TEST_CASE("safetensors: reader rejects malformed JSON with its offset", "[backend][safetensors]") {
  const std::string a = kA;
  expect_read_error(st_bytes("{" + a + ",}", k8), {"malformed JSON header at byte 54", "expected string literal"});
  expect_read_error(st_bytes(R"({"a" {}})", ""), {"byte 5", "expected ':'"});
  expect_read_error(st_bytes(R"({"a":{"dtype":"F32")", ""), {"byte 24", "end of input; expected '}'"});
  expect_read_error(st_bytes(R"({"a)", ""), {"byte 8", "missing closing quote"});
  expect_read_error(st_bytes(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", k8),
                    {"non-integer number 2.0"});
  expect_read_error(st_bytes(R"({"a":{"dtype":"F32","shape":[1e3],"data_offsets":[0,8]}})", k8),
                    {"non-integer"});
  expect_read_error(st_bytes(R"({"a":true})", ""), {"unsupported JSON value 'true'"});
  expect_read_error(st_bytes(R"({"a":null})", ""), {"unsupported JSON value 'null'"});
  expect_read_error(st_bytes(R"({"a":[01]})", ""), {"byte 7", "unexpected number literal"});  // 0 then 1
  expect_read_error(st_bytes(R"({"a":[99999999999999999999]})", ""), {"64-bit range"});
  expect_read_error(st_bytes(R"({"a\x":1})", ""), {"byte 4", "forbidden character after backslash"});
  expect_read_error(st_bytes(R"({"\u12G4":1})", ""), {"4 hex digits"});
  expect_read_error(st_bytes(R"({"\udc00":1})", ""), {"surrogate U+DC00..U+DFFF must follow"});
  expect_read_error(st_bytes(R"({"\ud800x":1})", ""), {"surrogate U+D800..U+DBFF must be followed"});
  expect_read_error(st_bytes("{\"a\tb\":1}", ""), {"control character"});
  expect_read_error(st_bytes("{\"\xc3\x28\":1}", ""), {"not valid UTF-8 at byte 2"});
  expect_read_error(st_bytes(R"({"a":{"shape":[[[1]]]}})", ""), {"nesting deeper"});
  std::string rank_2000 = "[1";
  for (int k = 1; k < 2000; ++k) rank_2000 += ",1";
  expect_read_error(st_bytes(R"({"a":{"dtype":"U8","shape":)" + rank_2000 + "]}}", ""),
                    {"array longer than 1024"});
  std::string rank_1024 = "[1";
  for (int k = 1; k < 1024; ++k) rank_1024 += ",1";
  expect_read_error(
      st_bytes(R"({"a":{"dtype":"U8","shape":)" + rank_1024 + R"(],"data_offsets":[0,1]}})", ""),
      {"file truncated", "tensor 'a'"});  // 1024 dims parse
  expect_read_error(st_bytes("{} x", ""), {"byte 3", "expected end of input"});
  expect_read_error(st_bytes("", "", false), {"byte 0", "unexpected end of input"});
  expect_read_error(st_bytes("[]", ""), {"header is an array, not an object"});
  expect_read_error(st_bytes(R"({"a":1})", ""), {"tensor 'a'", "not an object"});
}

TEST_CASE("safetensors: reader rejects bad tensor entries, naming the tensor",
          "[backend][safetensors]") {
  const std::string a = kA;
  expect_read_error(st_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", k8),
                    {"tensor 'w'", "missing field 'shape'"});
  expect_read_error(
      st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":[]}})", k8),
      {"tensor 'w'", "unexpected field 'x'"});
  expect_read_error(st_bytes(R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", k8),
                    {"tensor 'w'", "'shape' is a string"});
  expect_read_error(
      st_bytes(R"({"w":{"dtype":"F32","shape":[2],"dtype":"F32","data_offsets":[0,8]}})", k8),
      {"duplicate key 'dtype'"});
  expect_read_error(st_bytes(R"({"w":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", k8),
                    {"tensor 'w'", "unknown dtype 'F128'"});
  expect_read_error(st_bytes(R"({"w":{"dtype":"U8","shape":[-2,-4],"data_offsets":[0,8]}})", k8),
                    {"tensor 'w'", "negative dimension"});
  expect_read_error(st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"),
                    {"tensor 'w'", "span 4 bytes", "needs 8"});
  expect_read_error(st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", k8),
                    {"tensor 'w'", "invalid data_offsets [8, 0]"});
  expect_read_error(st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", k8),
                    {"tensor 'w'", "two integers"});
  expect_read_error(
      st_bytes(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
      {"tensor 'w'", "overflows"});
  expect_read_error(st_bytes("{" + a + "," + a + "}", k8), {"duplicate tensor name 'a'"});
  expect_read_error(st_bytes(R"({"__metadata__":{"k":1}})", ""),
                    {"__metadata__ entry 'k'", "not a string"});
  expect_read_error(st_bytes(R"({"__metadata__":[]})", ""), {"__metadata__ is an array"});
}

TEST_CASE("safetensors: reader rejects a data buffer that the tensors do not tile",
          "[backend][safetensors]") {
  const std::string a = kA;
  auto b_at = [](int begin) {
    return R"("b":{"dtype":"F32","shape":[2],"data_offsets":[)" + std::to_string(begin) + "," +
           std::to_string(begin + 8) + "]}";
  };
  expect_read_error(st_bytes("{" + a + "," + b_at(100) + "}", k8),
                    {"tensor 'b'", "[100, 108] lie outside the data buffer (8 bytes)"});
  expect_read_error(st_bytes("{" + a + "," + b_at(4) + "}", k12),
                    {"tensor 'b'", "overlap tensor 'a'"});
  expect_read_error(st_bytes("{" + a + "," + b_at(12) + "}", std::string(20, 'x')),
                    {"tensor 'b'", "hole of 4 bytes", "tensor 'a' ends at 8"});
  expect_read_error(st_bytes("{" + b_at(4) + "}", k12), {"tensor 'b'", "hole of 4 bytes"});
  expect_read_error(st_bytes("{" + a + "," + b_at(8) + "}", k12),
                    {"file truncated", "tensor 'b' needs data bytes [8, 16)", "only 12 bytes"});
  expect_read_error(st_bytes("{" + a + "}", "xxx"), {"file truncated", "tensor 'a'"});
  expect_read_error(st_bytes("{" + a + "}", k12), {"4 trailing bytes"});
  expect_read_error(st_bytes("{}", "x"), {"1 trailing bytes"});
}

}  // namespace nns::backend::test
