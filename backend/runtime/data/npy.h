// NumPy .npy files (format versions 1.0, 2.0 and 3.0), memory-mapped: a
// header dict ('descr', 'fortran_order', 'shape') and C-order data. Read
// as input data by the train block's arrays({...}) source.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/runtime/data/mapped_file.h"

namespace nns::backend::data {

class NpyArray {
 public:
  // Maps and validates `path`: magic, version, header, a little-endian
  // dtype of f4 f2 i4 i8 u1 u2, C order, and a data size that matches the
  // shape. Anything else is a DataError naming the file and the fault.
  explicit NpyArray(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::string& dtype() const { return dtype_; }  // "f4", "f2", "i4", "i8", "u1", "u2"
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  int64_t row_elements() const;
  // Element i (row-major) as a double (f2 decoded exactly).
  double at(int64_t i) const;

 private:
  MappedFile file_;
  std::string dtype_;
  std::vector<int64_t> shape_;
  const uint8_t* data_ = nullptr;
  int width_ = 0;
};

}  // namespace nns::backend::data
