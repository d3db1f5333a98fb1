#include "semantics/dimop.h"

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
      int64_t size = 1;
      for (const DimId& id : d.ids) size *= id.numeric ? std::stoll(id.name) : kPlaceholder;
      s.shape.push_back(size);
    }
    shapes.push_back(s);
  }
  return shapes;
}

}  // namespace nns::sema
