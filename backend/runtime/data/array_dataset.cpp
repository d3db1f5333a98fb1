#include "backend/runtime/data/array_dataset.h"

#include <cmath>
#include <cstring>

namespace nns::backend::data {

ArrayDataset::ArrayDataset(const sema::DataSpec& spec, const sema::Graph& g, int64_t microbatches_per_step)
    : InputSource(0, microbatches_per_step) {
  int64_t rows = -1;
  std::string rows_file;
  for (int t : g.inputs()) {
    const sema::TensorInfo& info = g.tensor(t);
    const std::string* path = nullptr;
    for (const auto& [name, file] : spec.arrays)
      if (name == info.name) path = &file;
    if (!path) throw DataError("arrays(...): no file for the model's input '" + info.name + "'");
    if (info.dtype != sema::DType::F32 && info.dtype != sema::DType::I32)
      throw DataError("arrays(...): input '" + info.name + "' is " + sema::dtype_name(info.dtype) + "; f32 and i32 inputs only");
    auto file = std::make_unique<NpyArray>(*path);
    const std::vector<int64_t>& fs = file->shape();
    bool fits = !fs.empty() && fs.size() == info.shape.size() && fs[0] >= 1;
    for (size_t d = 1; fits && d < fs.size(); ++d) fits = fs[d] == info.shape[d];
    if (!fits) {
      std::string want = "[N";
      for (size_t d = 1; d < info.shape.size(); ++d) want += ", " + std::to_string(info.shape[d]);
      throw DataError(*path + ": shape " + sema::shape_to_string(fs) + " does not fit input '" + info.name + "' " + sema::shape_to_string(info.shape) +
                      " (expected " + want + "]: N samples of the input without its batch dim)");
    }
    if (info.dtype == sema::DType::I32 && (file->dtype() == "f4" || file->dtype() == "f2"))
      throw DataError(*path + ": float data (" + file->dtype() + ") for the i32 input '" + info.name + "'");
    if (rows >= 0 && fs[0] != rows)
      throw DataError(*path + ": " + std::to_string(fs[0]) + " rows, but " + rows_file + " has " + std::to_string(rows) + " (row r of every file is sample r)");
    if (batch_ && info.shape[0] != batch_) throw DataError("arrays(...): the inputs' batch dims differ");
    rows = fs[0];
    rows_file = *path;
    batch_ = info.shape[0];
    feeds_.push_back(Feed{t, info.dtype, std::move(file)});
  }
  for (const auto& [name, file] : spec.arrays) {
    bool used = false;
    for (const Feed& f : feeds_) used = used || g.tensor(f.tensor).name == name;
    if (!used) throw DataError("arrays(...): '" + name + "' (" + file + ") is not an input of this model");
  }
  if (feeds_.empty()) throw DataError("arrays(...): the model has no inputs");
  sampler_.emplace(rows, static_cast<uint64_t>(spec.seed));
}

bool ArrayDataset::feeds(int t) const {
  for (const Feed& f : feeds_)
    if (f.tensor == t) return true;
  return false;
}

void ArrayDataset::fill(int t, int64_t k, void* out, int64_t row_begin, int64_t row_end) {
  const Feed* feed = nullptr;
  for (const Feed& f : feeds_)
    if (f.tensor == t) feed = &f;
  if (!feed) throw DataError("arrays(...): internal: input not fed");
  const NpyArray& a = *feed->file;
  const int64_t n = a.row_elements();
  if (row_end < 0 || row_end > batch_) row_end = batch_;
  for (int64_t row = std::max<int64_t>(row_begin, 0); row < row_end; ++row) {
    const int64_t src = sampler_->window(sample_of(k, row)) * n;
    for (int64_t e = 0; e < n; ++e) {
      const double v = a.at(src + e);
      if (feed->dtype == sema::DType::F32) {
        static_cast<float*>(out)[row * n + e] = static_cast<float>(v);
      } else {
        if (v < -2147483648.0 || v > 2147483647.0)
          throw DataError(a.path() + ": value " + std::to_string(static_cast<int64_t>(v)) + " at element " + std::to_string(src + e) +
                          " does not fit the i32 input");
        static_cast<int32_t*>(out)[row * n + e] = static_cast<int32_t>(v);
      }
    }
  }
}

}  // namespace nns::backend::data
