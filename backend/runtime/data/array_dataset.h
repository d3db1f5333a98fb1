// A train block's arrays({input: "file.npy", ...}) source: one .npy file
// per model input, memory-mapped; row r of every file is sample r (the
// files' leading dims must agree), the rest of a file's shape is the
// input's shape without its batch dim. Rows are read in the
// WindowSampler's order and sharded as token windows are (input_source.h).
#pragma once

#include <memory>
#include <vector>

#include "backend/runtime/data/input_source.h"
#include "backend/runtime/data/npy.h"

namespace nns::backend::data {

class ArrayDataset : public InputSource {
 public:
  ArrayDataset(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step);
  bool feeds(int t) const override;
  // f32 inputs take any of the .npy dtypes; i32 inputs integer ones only
  // (a value outside int32 is a DataError).
  void fill(int t, int64_t k, void* out, int64_t row_begin = 0, int64_t row_end = -1) override;

 private:
  struct Feed {
    int tensor;
    sema::DType dtype;
    std::unique_ptr<NpyArray> file;
  };
  std::vector<Feed> feeds_;
};

}  // namespace nns::backend::data
