// The registry rows the CUDA backend has no kernels for yet (neither the
// op nor its "<op>_backward"): the exact list, checked by
// device_conformance_test.cpp's coverage case, so it can only shrink as
// kernels land and can never hide a missing one. Empty since 2026-11-25:
// every registry row has CUDA kernels (verified on the host emulation; a
// new row joins this list until its kernels exist).
#pragma once

#include <set>
#include <string>

namespace nns::backend::test {

inline const std::set<std::string>& pending_cuda_rows() {
  static const std::set<std::string> rows = {
  };
  return rows;
}

// A node kind whose row is pending ("gelu", "gelu_backward").
inline bool cuda_kind_pending(const std::string& kind) {
  const std::string suffix = "_backward";
  std::string row = kind;
  if (row.size() > suffix.size() && row.compare(row.size() - suffix.size(), suffix.size(), suffix) == 0)
    row.resize(row.size() - suffix.size());
  return pending_cuda_rows().count(row) > 0;
}

}  // namespace nns::backend::test
