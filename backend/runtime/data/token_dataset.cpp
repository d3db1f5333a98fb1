#include "backend/runtime/data/token_dataset.h"

#include <algorithm>

namespace nns::backend::data {
namespace {

std::unique_ptr<TokenCorpus> open_corpus(const sema::DataSpec& spec) {
  if (spec.kind == "megatron_tokens") return open_megatron_tokens(spec.path);
  return open_flat_tokens(spec.path, spec.token_dtype);
}

std::string source_name(const sema::DataSpec& spec) { return spec.kind + "(\"" + spec.path + "\")"; }

// The model input named `name`, which must be [batch, seq] i32.
int token_input(const sema::Graph& g, const sema::DataSpec& spec, const std::string& name, const char* role) {
  for (int t : g.inputs()) {
    const sema::TensorInfo& info = g.tensor(t);
    if (info.name != name) continue;
    if (info.dtype != sema::DType::I32 || info.shape.size() != 2)
      throw DataError(source_name(spec) + ": the " + role + " input '" + name + "' is " + sema::dtype_name(info.dtype) + " " +
                      sema::shape_to_string(info.shape) + "; token windows feed [batch, seq] i32 inputs");
    return t;
  }
  throw DataError(source_name(spec) + ": the model has no input '" + name + "' for the " + role + " (name it with " + role + " = \"...\")");
}

int64_t window_count(const TokenCorpus& c, int64_t seq) {
  // Windows of seq + 1 tokens at a stride of seq.
  if (c.size() < seq + 1)
    throw DataError(c.name() + ": " + std::to_string(c.size()) + " tokens, shorter than one window of seq + 1 = " + std::to_string(seq + 1) + " tokens");
  return (c.size() - 1) / seq;
}

}  // namespace

bool is_token_source(const sema::DataSpec& spec) { return spec.kind == "token_file" || spec.kind == "megatron_tokens"; }

TokenDataset::TokenDataset(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step)
    : InputSource(0, microbatches_per_step),
      corpus_(open_corpus(spec)),
      input_(token_input(g, spec, spec.input, "input")),
      target_(token_input(g, spec, spec.target, "target")),
      seq_(g.tensor(input_).shape[1]) {
  batch_ = g.tensor(input_).shape[0];
  sampler_.emplace(window_count(*corpus_, seq_), static_cast<uint64_t>(spec.seed));
  if (g.tensor(target_).shape != g.tensor(input_).shape)
    throw DataError(source_name(spec) + ": the target input '" + spec.target + "' " + sema::shape_to_string(g.tensor(target_).shape) +
                    " differs from the token input '" + spec.input + "' " + sema::shape_to_string(g.tensor(input_).shape));
  for (int t : g.inputs())
    if (!feeds(t))
      throw DataError(source_name(spec) + " feeds '" + spec.input + "' and '" + spec.target + "' only; the model's input '" + g.tensor(t).name +
                      "' would have no data");
  // The vocabulary a token must fall in: tokens(vocab) on either input.
  for (int t : {input_, target_}) {
    const sema::InitSpec& init = g.tensor(t).init;
    if (init.kind == "tokens" && !init.args.empty()) {
      int64_t v = static_cast<int64_t>(init.args[0]);
      vocab_ = vocab_ ? std::min(vocab_, v) : v;
    }
  }
  window_.resize(static_cast<size_t>(seq_ + 1));
}

void TokenDataset::fill(int t, int64_t k, void* out_bytes, int64_t row_begin, int64_t row_end) {
  int32_t* out = static_cast<int32_t*>(out_bytes);
  const int64_t shift = t == target_ ? 1 : 0;
  if (row_end < 0 || row_end > batch_) row_end = batch_;
  for (int64_t row = std::max<int64_t>(row_begin, 0); row < row_end; ++row) {
    const int64_t start = sampler_->window(sample_of(k, row)) * seq_;
    corpus_->read(start, seq_ + 1, window_.data());
    for (int64_t i = 0; i <= seq_; ++i)
      if (window_[i] < 0 || (vocab_ > 0 && window_[i] >= vocab_))
        throw DataError(corpus_->name() + ": token " + std::to_string(window_[i]) + " at token offset " + std::to_string(start + i) +
                        " is outside the model's vocabulary [0, " + std::to_string(vocab_) + ")");
    for (int64_t i = 0; i < seq_; ++i) out[row * seq_ + i] = static_cast<int32_t>(window_[static_cast<size_t>(i + shift)]);
  }
}

}  // namespace nns::backend::data
