#include "backend/lowering/adapters.h"
#include "backend/lowering/adapter_search.h"
#include "semantics/check_deadline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <queue>
#include <stdexcept>

namespace nns::backend {

namespace {

int64_t canonical_stride(const std::vector<LayoutFactor>& fs, size_t i) {
  int64_t w = 1;
  for (size_t j = i + 1; j < fs.size(); ++j)
    if (fs[j].kind == LayoutFactor::D && fs[j].dim == fs[i].dim) w *= fs[j].n;
  return w;
}

std::string factor_text(const LayoutFactor& f, bool with_stride) {
  switch (f.kind) {
    case LayoutFactor::R: return "R(" + std::to_string(f.n) + ")";
    case LayoutFactor::V: return "V(" + std::to_string(f.n) + ")";
    case LayoutFactor::D:
      return "D" + std::to_string(f.dim) + "(" + std::to_string(f.n) + ")" +
             (with_stride ? "s" + std::to_string(f.stride) : std::string());
  }
  return "?";
}

// Search key: strides always spelled out (two layouts differing only in
// which digit weighs more are different layouts).
std::string key(const std::vector<LayoutFactor>& fs) {
  std::string k;
  for (const LayoutFactor& f : fs) k += factor_text(f, true) + " ";
  return k;
}

int64_t product(const std::vector<LayoutFactor>& fs) {
  int64_t p = 1;
  for (const LayoutFactor& f : fs) p *= f.n;
  return p;
}

int64_t split_of_dim(const std::vector<LayoutFactor>& fs, int dim) {
  int64_t p = 1;
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D && f.dim == dim) p *= f.n;
  return p;
}

int64_t pieces(const std::vector<LayoutFactor>& fs) {
  int64_t p = 1;
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D) p *= f.n;
  return p;
}

// Whether the D digits of every dim form a mixed-radix block index (each
// stride is the product of the sizes of the digits weighing less).
bool strides_valid(const std::vector<LayoutFactor>& fs) {
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> by_dim;  // dim -> (stride, n)
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D) by_dim[f.dim].push_back({f.stride, f.n});
  for (auto& [dim, digits] : by_dim) {
    std::sort(digits.begin(), digits.end());
    int64_t w = 1;
    for (auto& [stride, n] : digits) {
      if (stride != w) return false;
      w *= n;
    }
  }
  return true;
}

// Device groups that differ only in digit `acted` of the mixed-radix sequence.
// A group is the positions whose acted digit runs 0..n-1, the others
// fixed: a base position (acted digit 0) plus multiples of the digit's
// place value. Groups come in the order of their other digits, outermost
// first, which is the order of their base positions.
std::vector<std::vector<int>> groups_of(const std::vector<LayoutFactor>& fs, size_t acted,
                                        const std::vector<int>& devices) {
  int64_t place = 1;  // the acted digit's weight in a position
  for (size_t i = acted + 1; i < fs.size(); ++i) place *= fs[i].n;
  const int64_t n = fs[acted].n, count = static_cast<int64_t>(devices.size());
  std::vector<std::vector<int>> groups;
  groups.reserve(static_cast<size_t>(count / std::max<int64_t>(1, n)));
  for (int64_t base = 0; base < count; ++base) {
    if ((base / place) % n != 0) continue;
    std::vector<int> g(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) g[static_cast<size_t>(k)] = devices[static_cast<size_t>(base + k * place)];
    groups.push_back(std::move(g));
  }
  return groups;
}

Adapter search(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to,
               const std::vector<int>& devices, const sema::Shape& shape, double full_bytes, bool exhaustive,
               double give_up_above) {
  // The chain's costs are per device: every step's groups cover the whole
  // device list, so the total is the device count times as much.
  const double scale = full_bytes * static_cast<double>(devices.size());
  Chain scratch;
  const Chain& chain = cached_chain(from, to, shape, exhaustive, give_up_above / scale, scratch);
  if (!chain.error.empty()) throw std::invalid_argument(chain.error);
  Adapter a;
  for (const auto& [edge, after] : chain.moves) {
    AdapterStep step = edge.step;
    step.bytes *= scale;
    step.groups = groups_of(edge.acted_on, edge.acted, devices);
    step.after = Layout{devices, after};
    a.bytes += step.bytes;
    a.steps.push_back(step);
  }
  a.cost = a.bytes;
  return a;
}

}  // namespace

int64_t layout_pieces(const std::vector<LayoutFactor>& fs) { return pieces(fs); }
int64_t layout_split(const std::vector<LayoutFactor>& fs, int dim) { return split_of_dim(fs, dim); }

void normalize_factors_into(const std::vector<LayoutFactor>& in, std::vector<LayoutFactor>& fs, std::vector<int>& unset,
                            std::vector<LayoutFactor>& out) {
  fs.clear();
  for (const LayoutFactor& f : in) {
    if (f.n == 1) continue;
    LayoutFactor g = f;
    if (g.kind != LayoutFactor::D) {
      g.dim = -1;
      g.stride = 0;
    }
    fs.push_back(g);
  }
  // Dims whose digits carry no stride get the canonical ones.
  unset.clear();
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D && f.stride == 0 && std::find(unset.begin(), unset.end(), f.dim) == unset.end())
      unset.push_back(f.dim);
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i].kind == LayoutFactor::D && std::find(unset.begin(), unset.end(), fs[i].dim) != unset.end())
      fs[i].stride = canonical_stride(fs, i);
  out.clear();
  for (const LayoutFactor& f : fs) {
    if (!out.empty() && out.back().kind == f.kind && out.back().dim == f.dim &&
        (f.kind != LayoutFactor::D || out.back().stride == f.stride * f.n)) {
      out.back().n *= f.n;
      out.back().stride = f.stride;
    } else {
      out.push_back(f);
    }
  }
}

std::vector<LayoutFactor> normalized_factors(const std::vector<LayoutFactor>& in) {
  std::vector<LayoutFactor> fs, out;
  std::vector<int> unset;
  normalize_factors_into(in, fs, unset, out);
  return out;
}

Layout normalize(Layout l) {
  l.factors = normalized_factors(l.factors);
  return l;
}

std::string Layout::to_string() const {
  std::vector<LayoutFactor> fs = normalized_factors(factors);
  std::string s;
  // Strides are spelled out only where they differ from the canonical ones.
  for (size_t i = 0; i < fs.size(); ++i)
    s += factor_text(fs[i], fs[i].kind == LayoutFactor::D && fs[i].stride != canonical_stride(fs, i)) + " ";
  if (s.empty()) s = "R(1) ";
  s += "over [";
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + std::to_string(devices[i]);
  return s + "]";
}

const char* prim_name(AdapterStep::Prim p) {
  switch (p) {
    case AdapterStep::AllReduce: return "allreduce";
    case AdapterStep::AllGather: return "allgather";
    case AdapterStep::ReduceScatter: return "reduce-scatter";
    case AdapterStep::AllToAll: return "all-to-all";
    case AdapterStep::Chunk: return "chunk";
    case AdapterStep::ValueSplit: return "value-split";
    case AdapterStep::SendRecv: return "send/recv";
  }
  return "?";
}

std::string AdapterStep::to_string() const {
  std::string s = prim_name(prim);
  if (prim == AllToAll)
    s += " dim " + std::to_string(dim) + "->" + std::to_string(to_dim);
  else if (dim >= 0)
    s += " dim " + std::to_string(dim);
  s += prim == SendRecv ? " pairs " : " groups ";
  for (size_t g = 0; g < groups.size(); ++g) {
    s += g ? " " : "";
    s += "{";
    for (size_t i = 0; i < groups[g].size(); ++i)
      s += (i ? prim == SendRecv ? "->" : "," : "") + std::to_string(groups[g][i]);
    s += "}";
  }
  s += " bytes " + std::to_string(static_cast<int64_t>(bytes));
  if (prim == SendRecv && cross > 0) s += " (" + std::to_string(static_cast<int64_t>(cross)) + " across groups)";
  return s;
}

std::string Adapter::to_string() const {
  std::string s;
  for (const AdapterStep& st : steps) s += st.to_string() + "\n";
  return s;
}

void check_layout(const Layout& l, const sema::Shape& shape, const char* which) {
  if (l.devices.empty()) throw std::invalid_argument(std::string(which) + " layout has no devices");
  if (product(l.factors) != static_cast<int64_t>(l.devices.size()))
    throw std::invalid_argument(std::string(which) + " layout " + l.to_string() +
                                ": factors do not multiply to the group size");
  for (const LayoutFactor& f : l.factors)
    if (f.kind == LayoutFactor::D &&
        (f.dim < 0 || f.dim >= static_cast<int>(shape.size()) || shape[f.dim] % split_of_dim(l.factors, f.dim) != 0))
      throw std::invalid_argument(std::string(which) + " layout " + l.to_string() +
                                  ": a split does not divide the tensor");
  if (!strides_valid(l.factors))
    throw std::invalid_argument(std::string(which) + " layout " + l.to_string() +
                                ": strides do not form a block index");
}

bool in_group_cost(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const sema::Shape& shape,
                   int64_t elem_bytes, size_t devices, bool exhaustive, double& cost, int& steps,
                   double give_up_above) {
  const double scale = static_cast<double>(sema::numel(shape) * elem_bytes) * static_cast<double>(devices);
  Chain scratch;
  const Chain& chain =
      cached_chain(normalized_factors(from), normalized_factors(to), shape, exhaustive, give_up_above / scale, scratch);
  if (!chain.error.empty()) return false;
  cost = chain.cost * scale;
  steps = static_cast<int>(chain.moves.size());
  return true;
}

Adapter derive_in_group(const Layout& from_in, const Layout& to_in, const sema::Shape& shape, int64_t elem_bytes,
                        bool exhaustive, const AdapterCost& cost) {
  Layout from = normalize(from_in), to = normalize(to_in);
  check_layout(from, shape, "source");
  check_layout(to, shape, "target");
  if (from.devices != to.devices) throw std::logic_error("internal: derive_in_group over two device lists");
  double full = static_cast<double>(sema::numel(shape) * elem_bytes);
  return search(from.factors, to.factors, from.devices, shape, full, exhaustive, cost.give_up_above);
}

std::vector<std::pair<std::vector<LayoutFactor>, double>> chain_costs_from(const std::vector<LayoutFactor>& from_in,
                                                                           const sema::Shape& shape, int64_t elem_bytes,
                                                                           int64_t devices) {
  std::vector<LayoutFactor> from = normalized_factors(from_in);
  const double scale = static_cast<double>(sema::numel(shape) * elem_bytes) * static_cast<double>(devices);
  std::map<std::string, double> best;
  std::map<std::string, std::vector<LayoutFactor>> states;
  using Item = std::pair<double, std::string>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> open;
  best[key(from)] = 0;
  states[key(from)] = from;
  open.push({0, key(from)});
  while (!open.empty()) {
    sema::CheckDeadline::poll();
    auto [c, k] = open.top();
    open.pop();
    if (c > best[k]) continue;
    for (ChainMove& e : chain_moves(states[k], shape, 1.0)) {
      std::string nk = key(e.next);
      double nc = c + e.step.bytes;
      auto it = best.find(nk);
      if (it != best.end() && it->second <= nc) continue;
      best[nk] = nc;
      states[nk] = e.next;
      open.push({nc, nk});
    }
  }
  std::vector<std::pair<std::vector<LayoutFactor>, double>> out;
  for (auto& [k, c] : best) out.push_back({states[k], c * scale});
  return out;
}

std::string layout_key(const std::vector<LayoutFactor>& fs) { return key(normalized_factors(fs)); }

std::string factors_key(const std::vector<LayoutFactor>& fs) { return key(fs); }

bool layout_strides_valid(const std::vector<LayoutFactor>& fs) { return strides_valid(fs); }

}  // namespace nns::backend
