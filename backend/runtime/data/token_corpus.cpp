// The flat token file (nanoGPT's layout).
#include "backend/runtime/data/token_corpus.h"

#include <cstring>

namespace nns::backend::data {
namespace {

class FlatTokens : public TokenCorpus {
 public:
  FlatTokens(const std::string& path, int width) : file_(path), width_(width) {
    if (file_.size() % static_cast<size_t>(width_) != 0)
      throw DataError(path + ": " + std::to_string(file_.size()) + " bytes is not a whole number of " + std::to_string(width_ * 8) +
                      "-bit tokens (a truncated file, or the wrong dtype)");
  }
  int64_t size() const override { return static_cast<int64_t>(file_.size()) / width_; }
  const std::string& name() const override { return file_.path(); }
  void read(int64_t start, int64_t n, int64_t* out) const override {
    const uint8_t* p = file_.bytes() + start * width_;
    for (int64_t i = 0; i < n; ++i, p += width_) {
      if (width_ == 2) {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = v;
      } else {
        uint32_t v;
        std::memcpy(&v, p, 4);
        out[i] = v;
      }
    }
  }

 private:
  MappedFile file_;
  int width_;
};

}  // namespace

std::unique_ptr<TokenCorpus> open_flat_tokens(const std::string& path, const std::string& dtype) {
  int width = dtype == "uint16" ? 2 : dtype == "uint32" ? 4 : 0;
  if (!width) throw DataError(path + ": token dtype \"" + dtype + "\" is not \"uint16\" or \"uint32\"");
  return std::make_unique<FlatTokens>(path, width);
}

}  // namespace nns::backend::data
