#include "semantics/dimop.h"

#include <cstdint>

namespace nns::sema {

std::vector<InputShape> placeholder_shapes(const OpAnno& anno) {
  constexpr int64_t kPlaceholder = 2;
  std::vector<InputShape> shapes;
  for (const OperandAnno& op : anno.inputs) {
    InputShape s;
    if (op.non_tensor) {
      s.is_tensor = false;
      shapes.push_back(s);
      continue;
    }
    for (const DimAnno& d : op.dims) {
      if (d.star || d.unknown) {
        s.shape.push_back(kPlaceholder);
        continue;
      }
      // Past 64 bits (a bracket of many ids or large numbers) the size
      // saturates; bind() then reports the bracket, located.
      int64_t size = 1;
      for (const DimId& id : d.ids)
        if (__builtin_mul_overflow(size, id.numeric ? std::stoll(id.name) : kPlaceholder, &size)) size = INT64_MAX;
      s.shape.push_back(size);
    }
    shapes.push_back(s);
  }
  return shapes;
}

}  // namespace nns::sema
