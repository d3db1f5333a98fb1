// Token corpora: one long stream of token ids read from a memory-mapped
// file. Two layouts:
//   - a flat file of uint16 or uint32 ids, as nanoGPT's prepare.py writes
//     train.bin / val.bin (little-endian, no header);
//   - Megatron-LM's indexed dataset, PREFIX.bin + PREFIX.idx (the MMIDIDX
//     index). Its documents are read in order as one flat concatenation,
//     as Megatron's GPT dataset draws samples across document boundaries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/runtime/data/mapped_file.h"

namespace nns::backend::data {

class TokenCorpus {
 public:
  virtual ~TokenCorpus() = default;
  // Tokens in the stream.
  virtual int64_t size() const = 0;
  // Tokens [start, start + n) of the stream into out (start + n <= size()).
  virtual void read(int64_t start, int64_t n, int64_t* out) const = 0;
  // What error messages name: the file (or the .bin of a Megatron prefix).
  virtual const std::string& name() const = 0;
};

// A flat file of ids; dtype "uint16" or "uint32". A size that is not a
// whole number of ids is an error (a truncated or foreign file).
std::unique_ptr<TokenCorpus> open_flat_tokens(const std::string& path, const std::string& dtype);

// Megatron's PREFIX.idx + PREFIX.bin. Every index field is checked
// against the file sizes before a token is read.
std::unique_ptr<TokenCorpus> open_megatron_tokens(const std::string& prefix);

// The parsed MMIDIDX index (exposed for the tests).
struct MegatronIndex {
  int dtype_code = 0;  // Megatron's DType: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16 (6, 7 floats: refused)
  int token_bytes = 0;
  std::vector<int32_t> sizes;      // tokens per sequence
  std::vector<int64_t> pointers;   // byte offset of each sequence in .bin
  std::vector<int64_t> documents;  // sequence index where each document starts, then the sequence count
};
MegatronIndex read_megatron_index(const std::string& idx_path);

}  // namespace nns::backend::data
