// A train block's token source (token_file(...) or megatron_tokens(...)):
// the corpus cut into windows of seq + 1 tokens at a stride of seq
// (consecutive windows share one token, as in Megatron's GPT dataset), read
// in the WindowSampler's order (input_source.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/runtime/data/input_source.h"
#include "backend/runtime/data/token_corpus.h"

namespace nns::backend::data {

// True when the train block's data is a token source.
bool is_token_source(const sema::DataSpec& spec);

class TokenDataset : public InputSource {
 public:
  // `microbatches_per_step`: micro-batches per step over all replicas.
  // Throws DataError for a bad file or one shorter than a window, and for
  // model inputs that do not fit (named in the message).
  TokenDataset(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step);

  // Whether input tensor `t` is the token or the target input.
  bool feeds(int t) const override { return t == input_ || t == target_; }
  // Micro-batch k's values of input `t` ([batch, seq] int32). A token
  // outside [0, vocab) is a DataError naming the file and offset.
  void fill(int t, int64_t k, void* out, int64_t row_begin = 0, int64_t row_end = -1) override;

  int64_t windows() const { return samples_per_epoch(); }

 private:
  std::unique_ptr<TokenCorpus> corpus_;
  int input_ = -1, target_ = -1;
  int64_t seq_ = 0, vocab_ = 0;  // vocab 0: unchecked
  std::vector<int64_t> window_;  // scratch: one window's tokens
};

}  // namespace nns::backend::data
