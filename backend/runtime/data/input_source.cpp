#include "backend/runtime/data/input_source.h"

#include "backend/runtime/data/array_dataset.h"
#include "backend/runtime/data/mapped_file.h"
#include "backend/runtime/data/token_dataset.h"

namespace nns::backend::data {
namespace {

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

std::unique_ptr<InputSource> make_input_source(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step) {
  if (is_token_source(spec)) return std::make_unique<TokenDataset>(spec, g, microbatches_per_step);
  if (spec.kind == "arrays") return std::make_unique<ArrayDataset>(spec, g, microbatches_per_step);
  return nullptr;
}

DataPosition InputSource::position_after(int64_t step) const {
  return sampler_->position(origin_samples_ + (step * microbatches_per_step_ - origin_microbatch_) * batch_);
}

void InputSource::add_metadata(int64_t step, std::map<std::string, std::string>& meta) const {
  DataPosition p = position_after(step);
  meta["data_seed"] = std::to_string(p.seed);
  meta["data_windows"] = std::to_string(p.windows);
  meta["data_epoch"] = std::to_string(p.epoch);
  meta["data_index"] = std::to_string(p.index);
}

void InputSource::resume(const std::map<std::string, std::string>& meta, const std::string& path, int64_t step) {
  origin_microbatch_ = step * microbatches_per_step_;
  origin_samples_ = origin_microbatch_ * batch_;
  if (!meta.count("data_epoch")) return;  // saved by a run on other data
  for (const char* key : {"data_seed", "data_windows", "data_index"})
    if (!meta.count(key)) throw DataError(path + ": checkpoint has data_epoch but no '" + key + "'");
  const int64_t seed = metadata_int(meta, "data_seed", path), windows = metadata_int(meta, "data_windows", path);
  if (static_cast<uint64_t>(seed) != sampler_->seed() || windows != sampler_->windows())
    throw DataError(path + ": the checkpoint read a corpus of " + std::to_string(windows) + " windows in seed " + std::to_string(seed) +
                    "'s order; this run's data has " + std::to_string(sampler_->windows()) + " windows, seed " + std::to_string(sampler_->seed()) +
                    " (a resumed run must read the same data)");
  const int64_t index = metadata_int(meta, "data_index", path);
  if (index >= windows) throw DataError(path + ": checkpoint data_index " + std::to_string(index) + " is not below data_windows");
  origin_samples_ = metadata_int(meta, "data_epoch", path) * windows + index;
}

}  // namespace nns::backend::data
