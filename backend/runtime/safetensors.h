// Reading and writing Hugging Face's safetensors format, strictly.
//
// Layout of a file:
//   [8 bytes]  N, little-endian uint64: the length of the JSON header
//   [N bytes]  UTF-8 JSON object: tensor name -> {"dtype": "F32",
//              "shape": [2, 3], "data_offsets": [begin, end]}, plus an
//              optional "__metadata__": {string: string}
//   [rest]     the data buffer; data_offsets are relative to its start and
//              the tensors tile it exactly (no gaps, no overlap, no tail).
// Tensor bytes are row-major and little-endian, stored and returned as-is:
// this module never converts dtypes (the runtime decides what "BF16" means).
//
// The reader is deliberately stricter than the reference implementation
// (unknown or duplicate JSON fields, floats, true/false/null are rejected):
// a checkpoint that is not exactly what we expect is a bug to report, not
// something to guess about. Every error is a SafetensorsError whose message
// names the file and, where one is at fault, the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace nns::backend {

// One tensor: its header entry and its raw bytes.
struct StTensor {
  std::string name;            // the JSON key, e.g. "layers.3.attn.qkv.weight"
  std::string dtype;           // safetensors code: "F32", "BF16", "I64", "BOOL", ...
  std::vector<int64_t> shape;  // [] is a scalar (one element); a 0 dim makes it empty
  std::vector<uint8_t> data;   // numel(shape) * dtype_size(dtype) bytes
};

// The whole content of a file.
struct SafetensorsFile {
  std::vector<StTensor> tensors;                // in data-offset order
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty if absent
  // The tensor called `name`, or nullptr. Linear scan: files hold at most a
  // few thousand tensors and are looked up once each at load time.
  const StTensor* find(const std::string& name) const;
};

struct SafetensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bytes per element of a safetensors dtype code, 0 for an unknown code.
// Known: BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 I16 U16 F16 BF16 I32 U32 F32
// C64 F64 I64 U64. The sub-byte codes (F4, F6_*) are not supported.
size_t dtype_size(const std::string& dtype);

// Reads and validates a whole file (header and data). Throws
// SafetensorsError on any I/O error or any deviation from the format.
SafetensorsFile read_safetensors(const std::string& path);

// A file's header alone, checked as read_safetensors checks it: what a
// checkpoint larger than memory, or a shard of one, is read through, one
// tensor at a time.
struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets
};
struct SafetensorsHeader {
  std::string path;
  std::vector<StEntry> entries;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + the header's length
  const StEntry* find(const std::string& name) const;
};
SafetensorsHeader read_safetensors_header(const std::string& path);
// The bytes of entry `e` of `h`'s file (opened again; refused if the entry
// is no longer where the header said).
std::vector<uint8_t> read_tensor_data(const SafetensorsHeader& h, const StEntry& e);

// Metadata field `key` of `f` (read from `path`) as a non-negative integer:
// decimal digits only (no sign, space, padding or leading zero), within 64
// bits. Throws SafetensorsError "PATH: metadata 'step' must be a
// non-negative integer (got '3abc')", or "...: no 'step' metadata".
int64_t metadata_count(const SafetensorsFile& f, const std::string& key, const std::string& path);
// 1 to 19 decimal digits, within 64 bits (leading zeros allowed): what the
// metadata readers accept as a count.
bool parse_count(const std::string& text, int64_t& out);

// The F32 tensor `name` of `f` (read from `path`, named in the messages) as
// floats, checked against the `shape` (a sema::Shape) the model expects.
// Throws SafetensorsError "PATH: missing tensor 'NAME'", "...: tensor 'NAME'
// is I32, expected F32" or "...: tensor 'NAME' has shape [4, 3], expected
// [3, 4]". Weights, optimizer state and checkpoints are read through it.
std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name, const std::vector<int64_t>& shape, const std::string& path);

// An F32 tensor of `n` floats.
StTensor f32_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data, size_t n);

// Writes `tensors` and `metadata` to `path`, byte-for-byte the way the
// reference (Rust/Python) implementation does for the same input: tensors
// ordered by decreasing dtype alignment then by name (so every tensor's data
// is naturally aligned once the header is space-padded to a multiple of 8),
// compact JSON, "__metadata__" first and omitted when empty. Deterministic:
// the same tensors give the same bytes, whatever their order in `tensors`.
//
// Writes to path + ".tmp.<pid>.<nonce>" (write_file_atomic) then fsync + rename(2), so a reader never
// sees a half-written file and a crash leaves the old file intact. (Two
// threads of one process must not write the same path at the same time.)
// Throws SafetensorsError on invalid input (unknown dtype, negative dim,
// data size not matching shape, duplicate or reserved name, invalid UTF-8)
// or on I/O failure, in which case the temporary file is removed.
void write_safetensors_atomic(const std::string& path, const std::vector<StTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace nns::backend
