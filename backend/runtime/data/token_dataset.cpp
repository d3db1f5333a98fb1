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

int64_t metadata_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  const std::string& v = meta.at(key);
  size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(v, &used);
  } catch (...) {
  }
  if (used != v.size() || n < 0) throw DataError(path + ": checkpoint metadata '" + key + "' = \"" + v + "\" is not a non-negative integer");
  return n;
}

}  // namespace

bool is_token_source(const sema::DataSpec& spec) { return spec.kind == "token_file" || spec.kind == "megatron_tokens"; }

TokenDataset::TokenDataset(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step)
    : corpus_(open_corpus(spec)),
      input_(token_input(g, spec, spec.input, "input")),
      target_(token_input(g, spec, spec.target, "target")),
      batch_(g.tensor(input_).shape[0]),
      seq_(g.tensor(input_).shape[1]),
      microbatches_per_step_(microbatches_per_step),
      sampler_(window_count(*corpus_, seq_), static_cast<uint64_t>(spec.seed)) {
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

void TokenDataset::fill(int t, int64_t k, int32_t* out, int64_t row_begin, int64_t row_end) {
  const int64_t shift = t == target_ ? 1 : 0;
  if (row_end < 0 || row_end > batch_) row_end = batch_;
  for (int64_t row = std::max<int64_t>(row_begin, 0); row < row_end; ++row) {
    const int64_t start = sampler_.window(sample_of(k, row)) * seq_;
    corpus_->read(start, seq_ + 1, window_.data());
    for (int64_t i = 0; i <= seq_; ++i)
      if (window_[i] < 0 || (vocab_ > 0 && window_[i] >= vocab_))
        throw DataError(corpus_->name() + ": token " + std::to_string(window_[i]) + " at token offset " + std::to_string(start + i) +
                        " is outside the model's vocabulary [0, " + std::to_string(vocab_) + ")");
    for (int64_t i = 0; i < seq_; ++i) out[row * seq_ + i] = static_cast<int32_t>(window_[static_cast<size_t>(i + shift)]);
  }
}

DataPosition TokenDataset::position_after(int64_t step) const {
  return sampler_.position(origin_samples_ + (step * microbatches_per_step_ - origin_microbatch_) * batch_);
}

void TokenDataset::add_metadata(int64_t step, std::map<std::string, std::string>& meta) const {
  DataPosition p = position_after(step);
  meta["data_seed"] = std::to_string(p.seed);
  meta["data_windows"] = std::to_string(p.windows);
  meta["data_epoch"] = std::to_string(p.epoch);
  meta["data_index"] = std::to_string(p.index);
}

void TokenDataset::resume(const std::map<std::string, std::string>& meta, const std::string& path, int64_t step) {
  origin_microbatch_ = step * microbatches_per_step_;
  origin_samples_ = origin_microbatch_ * batch_;
  if (!meta.count("data_epoch")) return;  // saved by a run on other data
  for (const char* key : {"data_seed", "data_windows", "data_index"})
    if (!meta.count(key)) throw DataError(path + ": checkpoint has data_epoch but no '" + key + "'");
  const int64_t seed = metadata_int(meta, "data_seed", path), windows = metadata_int(meta, "data_windows", path);
  if (static_cast<uint64_t>(seed) != sampler_.seed() || windows != sampler_.windows())
    throw DataError(path + ": the checkpoint read a corpus of " + std::to_string(windows) + " windows in seed " + std::to_string(seed) +
                    "'s order; this run's data has " + std::to_string(sampler_.windows()) + " windows, seed " + std::to_string(sampler_.seed()) +
                    " (a resumed run must read the same data)");
  const int64_t index = metadata_int(meta, "data_index", path);
  if (index >= windows) throw DataError(path + ": checkpoint data_index " + std::to_string(index) + " is not below data_windows");
  origin_samples_ = metadata_int(meta, "data_epoch", path) * windows + index;
}

}  // namespace nns::backend::data
