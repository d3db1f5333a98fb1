// A train block's token source (token_file(...) or megatron_tokens(...)) as the
// runtime reads it: the corpus cut into windows of seq + 1 tokens at a
// stride of seq (consecutive windows share one token, as in Megatron's GPT
// dataset), read in the WindowSampler's order. Micro-batch k's row b is
// sample number origin + (k - k_origin) * batch + b, with k numbered as one
// device numbers its micro-batches (replicas interleaved): the Trainer and
// every plan read the same samples in the same steps, and each replica a
// disjoint share.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/runtime/data/sampler.h"
#include "backend/runtime/data/token_corpus.h"
#include "semantics/graph.h"
#include "semantics/train_spec.h"

namespace nns::backend::data {

// True when the train block's data is a token source.
bool is_token_source(const sema::DataSpec& spec);

class TokenDataset {
 public:
  // `microbatches_per_step`: micro-batches per step over all replicas.
  // Throws DataError for a bad file or one shorter than a window, and for
  // model inputs that do not fit (named in the message).
  TokenDataset(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step);

  // Whether input tensor `t` is the token or the target input.
  bool feeds(int t) const { return t == input_ || t == target_; }
  // Micro-batch k's values of input `t` ([batch, seq] int32, row-major),
  // rows [row_begin, row_end) only (row_end < 0: to the last): a rank
  // holding part of the batch reads only its rows' windows; the other rows
  // of `out` are left as they are. A token outside [0, vocab) is a
  // DataError naming the file and offset.
  void fill(int t, int64_t k, int32_t* out, int64_t row_begin = 0, int64_t row_end = -1);

  // The position after `step` steps, and its checkpoint metadata.
  DataPosition position_after(int64_t step) const;
  void add_metadata(int64_t step, std::map<std::string, std::string>& meta) const;
  // A resumed run continues where the checkpoint's run stood after `step`
  // steps. A checkpoint without data metadata (saved by a run on other
  // data) starts at the position `step` implies; one with a different seed
  // or corpus size is refused.
  void resume(const std::map<std::string, std::string>& meta, const std::string& path, int64_t step);

  int64_t windows() const { return sampler_.windows(); }

 private:
  int64_t sample_of(int64_t k, int64_t row) const { return origin_samples_ + (k - origin_microbatch_) * batch_ + row; }

  std::unique_ptr<TokenCorpus> corpus_;
  int input_ = -1, target_ = -1;
  int64_t batch_ = 0, seq_ = 0, vocab_ = 0;  // vocab 0: unchecked
  int64_t microbatches_per_step_;
  WindowSampler sampler_;
  int64_t origin_microbatch_ = 0, origin_samples_ = 0;
  std::vector<int64_t> window_;  // scratch: one window's tokens
};

}  // namespace nns::backend::data
