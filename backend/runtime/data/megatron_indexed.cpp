// Megatron-LM's indexed dataset (MMIDIDX), read from its definition:
//   PREFIX.idx: magic "MMIDIDX\0\0" (9 bytes), version u64 (= 1), dtype
//   code u8, sequence count u64, document count u64, then sizes
//   int32[sequences], pointers int64[sequences] (byte offsets into .bin),
//   document indices int64[documents] (0, the first sequence of each next
//   document, ..., the sequence count). All little-endian.
//   PREFIX.bin: the sequences' tokens, each at its pointer.
#include <algorithm>
#include <cstring>

#include "backend/runtime/data/token_corpus.h"

namespace nns::backend::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

int token_width(int code) {
  switch (code) {
    case 1: case 2: return 1;  // uint8, int8
    case 3: case 8: return 2;  // int16, uint16
    case 4: return 4;          // int32
    case 5: return 8;          // int64
    default: return 0;         // 6 float64, 7 float32: not token ids
  }
}

// Reads little-endian fields in order, each bounds-checked.
class Cursor {
 public:
  Cursor(const MappedFile& f) : f_(f) {}
  template <typename T>
  T take(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, f_.bytes() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  template <typename T>
  void take_array(std::vector<T>& out, uint64_t n, const char* what) {
    if (n > (f_.size() - at_) / sizeof(T)) truncated(what);
    out.resize(n);
    if (n) std::memcpy(out.data(), f_.bytes() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  const uint8_t* here() const { return f_.bytes() + at_; }
  void need(size_t n, const char* what) {
    if (f_.size() - at_ < n) truncated(what);
  }

 private:
  [[noreturn]] void truncated(const char* what) {
    throw DataError(f_.path() + ": truncated index (the file ends inside the " + what + ", at byte " + std::to_string(f_.size()) + ")");
  }
  const MappedFile& f_;
  size_t at_ = 0;
};

class MegatronTokens : public TokenCorpus {
 public:
  MegatronTokens(const std::string& prefix) : index_(read_megatron_index(prefix + ".idx")), bin_(prefix + ".bin") {
    const int w = index_.token_bytes;
    starts_.reserve(index_.sizes.size() + 1);
    starts_.push_back(0);
    for (size_t s = 0; s < index_.sizes.size(); ++s) {
      const int64_t end = index_.pointers[s] + static_cast<int64_t>(index_.sizes[s]) * w;
      if (index_.pointers[s] < 0 || end > static_cast<int64_t>(bin_.size()))
        throw DataError(bin_.path() + ": sequence " + std::to_string(s) + " (bytes " + std::to_string(index_.pointers[s]) + ".." +
                        std::to_string(end) + ") lies past the end of the file (" + std::to_string(bin_.size()) +
                        " bytes): a truncated .bin or an index for another file");
      starts_.push_back(starts_.back() + index_.sizes[s]);
    }
  }
  int64_t size() const override { return starts_.back(); }
  const std::string& name() const override { return bin_.path(); }
  void read(int64_t start, int64_t n, int64_t* out) const override {
    // The sequence holding `start`: the last whose first token is <= start.
    size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    for (int64_t i = 0; i < n; ++i, ++start) {
      while (start >= starts_[s + 1]) ++s;  // into the next sequence (empty ones skipped)
      out[i] = token(index_.pointers[s] + (start - starts_[s]) * index_.token_bytes);
    }
  }

 private:
  int64_t token(int64_t byte) const {
    const uint8_t* p = bin_.bytes() + byte;
    switch (index_.dtype_code) {
      case 1: return *p;
      case 2: return static_cast<int8_t>(*p);
      case 3: { int16_t v; std::memcpy(&v, p, 2); return v; }
      case 8: { uint16_t v; std::memcpy(&v, p, 2); return v; }
      case 4: { int32_t v; std::memcpy(&v, p, 4); return v; }
      default: { int64_t v; std::memcpy(&v, p, 8); return v; }
    }
  }
  MegatronIndex index_;
  MappedFile bin_;
  std::vector<int64_t> starts_;  // stream position of each sequence's first token, then the total
};

}  // namespace

MegatronIndex read_megatron_index(const std::string& idx_path) {
  MappedFile f(idx_path);
  Cursor c(f);
  c.need(sizeof kMagic, "magic");
  if (std::memcmp(c.here(), kMagic, sizeof kMagic) != 0)
    throw DataError(idx_path + ": wrong magic (not a Megatron MMIDIDX index; expected the bytes \"MMIDIDX\\x00\\x00\")");
  for (size_t i = 0; i < sizeof kMagic; ++i) c.take<uint8_t>("magic");
  const uint64_t version = c.take<uint64_t>("version");
  if (version != 1) throw DataError(idx_path + ": index version " + std::to_string(version) + " (only version 1 is known)");
  MegatronIndex ix;
  ix.dtype_code = c.take<uint8_t>("dtype code");
  ix.token_bytes = token_width(ix.dtype_code);
  if (!ix.token_bytes) throw DataError(idx_path + ": dtype code " + std::to_string(ix.dtype_code) + " is not an integer token type");
  const uint64_t sequences = c.take<uint64_t>("sequence count");
  const uint64_t documents = c.take<uint64_t>("document count");
  c.take_array(ix.sizes, sequences, "sequence sizes");
  c.take_array(ix.pointers, sequences, "sequence pointers");
  c.take_array(ix.documents, documents, "document indices");
  for (size_t s = 0; s < ix.sizes.size(); ++s)
    if (ix.sizes[s] < 0) throw DataError(idx_path + ": sequence " + std::to_string(s) + " has a negative size");
  // Document boundaries are not needed to cut windows across them, but a
  // broken table means a broken index.
  bool ok = !ix.documents.empty() && ix.documents.front() == 0 && ix.documents.back() == static_cast<int64_t>(sequences);
  for (size_t d = 1; ok && d < ix.documents.size(); ++d) ok = ix.documents[d] >= ix.documents[d - 1];
  if (!ok) throw DataError(idx_path + ": document indices are not an ascending list from 0 to the sequence count " + std::to_string(sequences));
  return ix;
}

std::unique_ptr<TokenCorpus> open_megatron_tokens(const std::string& prefix) { return std::make_unique<MegatronTokens>(prefix); }

}  // namespace nns::backend::data
