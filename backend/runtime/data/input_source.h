// A train block's file data source as the runtime reads it: token windows
// (token_dataset.h) or rows of .npy arrays (array_dataset.h). Both read
// their samples in a WindowSampler order: micro-batch k's row b is sample
// number origin + (k - k_origin) * batch + b, with k numbered as one device
// numbers its micro-batches (replicas interleaved), so the Trainer and
// every plan read the same samples in the same steps and each replica a
// disjoint share. Checkpoints save the position; a resumed run continues it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "backend/runtime/data/sampler.h"
#include "semantics/graph.h"
#include "semantics/train_spec.h"

namespace nns::backend::data {

class InputSource {
 public:
  virtual ~InputSource() = default;
  // Whether this source feeds input tensor `t`.
  virtual bool feeds(int t) const = 0;
  // Micro-batch k's values of input `t` in its dtype (row-major), rows
  // [row_begin, row_end) only (row_end < 0: to the last): a rank holding
  // part of the batch reads only its rows; the other rows of `out` are
  // left as they are. Bad data is a DataError naming the file.
  virtual void fill(int t, int64_t k, void* out, int64_t row_begin = 0, int64_t row_end = -1) = 0;

  int64_t samples_per_epoch() const { return sampler_->windows(); }
  // The position after `step` steps, and its checkpoint metadata
  // (data_seed, data_windows, data_epoch, data_index).
  DataPosition position_after(int64_t step) const;
  void add_metadata(int64_t step, std::map<std::string, std::string>& meta) const;
  // Continue where the checkpoint's run stood after `step` steps. A
  // checkpoint without data metadata (a run on other data) starts at the
  // position `step` implies; one with another seed or sample count is
  // refused.
  void resume(const std::map<std::string, std::string>& meta, const std::string& path, int64_t step);

 protected:
  InputSource(int64_t batch, int64_t microbatches_per_step) : batch_(batch), microbatches_per_step_(microbatches_per_step) {}
  int64_t sample_of(int64_t k, int64_t row) const { return origin_samples_ + (k - origin_microbatch_) * batch_ + row; }

  int64_t batch_;
  int64_t microbatches_per_step_;
  std::optional<WindowSampler> sampler_;  // set by the derived constructor
  int64_t origin_microbatch_ = 0, origin_samples_ = 0;
};

// The source the train block's data names, or null (synthetic data, or a
// safetensors file, read elsewhere). `microbatches_per_step` counts all
// replicas' micro-batches.
std::unique_ptr<InputSource> make_input_source(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step);

}  // namespace nns::backend::data
