// The buffer check's table of layouts (buffer_layouts.h).
#include "backend/lowering/buffer_layouts.h"

#include <algorithm>

#include "backend/lowering/parallel.h"

namespace nns::backend {

BufferLayouts::BufferLayouts(const sema::Graph& g, const LoweredPlan& lp) : produced(g.tensors().size(), -1) {
  std::vector<const Layout*> layouts;
  int width = 0;
  for (const CommEdge& e : lp.comm->edges) {
    first.push_back(layouts.size());
    const size_t t = static_cast<size_t>(e.tensor);
    if (!e.backward && t < produced.size() && produced[t] < 0) produced[t] = static_cast<int64_t>(layouts.size());
    layouts.push_back(&e.from);
    for (const AdapterStep& s : e.adapter.steps) layouts.push_back(&s.after);
  }
  for (const Layout* l : layouts)
    for (int d : l->devices) width = std::max(width, d + 1);
  words = (static_cast<size_t>(width) + 63) / 64;
  vparts.assign(layouts.size(), 1);
  member.assign(layouts.size() * words, 0);
  // Each layout writes only its own entries.
  parallel_for(layouts.size(), [&](size_t i) {
    for (const LayoutFactor& f : layouts[i]->factors)
      if (f.kind == LayoutFactor::V) vparts[i] *= f.n;
    for (int d : layouts[i]->devices)
      if (d >= 0) member[i * words + static_cast<size_t>(d) / 64] |= uint64_t{1} << (d % 64);
  });
}

}  // namespace nns::backend
