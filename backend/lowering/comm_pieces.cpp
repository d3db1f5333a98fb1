#include "backend/lowering/comm_pieces.h"

#include <algorithm>
#include <unordered_map>

#include "backend/lowering/comm_plan.h"
#include "backend/lowering/geometry.h"
#include "backend/lowering/parallel.h"
#include "semantics/check_deadline.h"

namespace nns::backend {

using sema::OperandSlice;

namespace {

bool same_ranges(const OperandSlice& a, const OperandSlice& b) { return a.start == b.start && a.length == b.length; }

// One device's pieces while they merge: piece i's start and length at
// box[i * 2 * rank ..], its partial-sum label beside.
struct Merging {
  size_t rank;
  std::vector<int64_t> box;
  std::vector<int64_t> value_index, value_parts;
  int64_t* start(size_t i) { return &box[i * 2 * rank]; }
  int64_t* length(size_t i) { return &box[i * 2 * rank + rank]; }
};

// Merges piece b into piece a, if they are adjacent along a dim (same
// values) or complementary partial sums of the same region.
bool merge(Merging& m, size_t a, size_t b) {
  const size_t rank = m.rank;
  int64_t *sa = m.start(a), *la = m.length(a), *sb = m.start(b), *lb = m.length(b);
  const bool same = std::equal(sa, sa + rank, sb) && std::equal(la, la + rank, lb);
  if (same && m.value_parts[a] == m.value_parts[b]) {
    if (m.value_index[a] == m.value_index[b]) return true;  // the same piece twice
    // Values k and k+1 of n merge into k/2 of n/2 when k is even.
    int64_t lo = std::min(m.value_index[a], m.value_index[b]), hi = std::max(m.value_index[a], m.value_index[b]);
    if (hi == lo + 1 && lo % 2 == 0 && m.value_parts[a] % 2 == 0) {
      m.value_index[a] = lo / 2;
      m.value_parts[a] /= 2;
      return true;
    }
    return false;
  }
  if (m.value_index[a] != m.value_index[b] || m.value_parts[a] != m.value_parts[b]) return false;
  size_t diff = rank;
  for (size_t d = 0; d < rank; ++d) {
    if (sa[d] == sb[d] && la[d] == lb[d]) continue;
    if (diff < rank) return false;
    diff = d;
  }
  if (diff == rank) return false;
  const size_t first = sa[diff] < sb[diff] ? a : b, second = first == a ? b : a;
  const int64_t *sf = m.start(first), *lf = m.length(first);
  if (sf[diff] + lf[diff] != m.start(second)[diff] || lf[diff] != m.length(second)[diff]) return false;
  // Only aligned pairs keep a regular split (piece 2i with 2i+1).
  if ((sf[diff] / lf[diff]) % 2 != 0) return false;
  if (first != a) {
    std::copy(sf, sf + rank, sa);
    std::copy(lf, lf + rank, la);
  }
  la[diff] *= 2;
  return true;
}

// Merges pairs until none merges (first pair in list order each time);
// returns the pieces left, in order.
std::vector<size_t> merge_all(Merging& m, size_t count) {
  std::vector<size_t> alive(count);
  for (size_t i = 0; i < count; ++i) alive[i] = i;
  bool changed = true;
  while (changed && alive.size() > 1) {
    changed = false;
    for (size_t i = 0; i < alive.size() && !changed; ++i)
      for (size_t j = i + 1; j < alive.size() && !changed; ++j)
        if (merge(m, alive[i], alive[j])) {
          alive.erase(alive.begin() + static_cast<long>(j));
          changed = true;
        }
  }
  return alive;
}

// The one piece a device holds, after merging.
struct Held {
  const int64_t* start;
  const int64_t* length;
  int64_t value_index, value_parts;
};

// Merges each device's pieces (`pieces` sorted by device, stably) into one:
// devices ascending, with what each holds (merged pieces kept in `store`).
// False (and why) when a device's pieces do not merge into one.
bool held_pieces(const std::vector<PieceRef>& pieces, size_t rank, std::vector<int>& devices, std::vector<Held>& held,
                 std::vector<int64_t>& store, std::string& why) {
  store.reserve(pieces.size() * 2 * rank);  // `held` points into it
  Merging m{rank, {}, {}, {}};
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i;
    while (j < pieces.size() && pieces[j].device == pieces[i].device) ++j;
    const PieceRef& p = pieces[i];
    if (j - i == 1) {
      held.push_back({p.slice->start.data(), p.slice->length.data(), p.value_index, p.value_parts});
    } else {
      m.box.clear();
      m.value_index.clear();
      m.value_parts.clear();
      for (size_t k = i; k < j; ++k) {
        const OperandSlice& s = *pieces[k].slice;
        if (s.start.size() != rank || s.length.size() != rank) {
          why = "device " + std::to_string(p.device) + " holds pieces of another rank";
          return false;
        }
        m.box.insert(m.box.end(), s.start.begin(), s.start.end());
        m.box.insert(m.box.end(), s.length.begin(), s.length.end());
        m.value_index.push_back(pieces[k].value_index);
        m.value_parts.push_back(pieces[k].value_parts);
      }
      std::vector<size_t> left = merge_all(m, j - i);
      if (left.size() != 1) {
        why = "device " + std::to_string(p.device) + " holds " + std::to_string(left.size()) +
              " pieces that do not merge into one";
        return false;
      }
      const size_t at = store.size();
      store.insert(store.end(), m.start(left[0]), m.start(left[0]) + 2 * rank);
      held.push_back({&store[at], &store[at + rank], m.value_index[left[0]], m.value_parts[left[0]]});
    }
    devices.push_back(p.device);
    i = j;
  }
  return true;
}

// Groups the devices by key (keys[i * width ..]: block per dim, then label):
// replica[i] is device i's rank among the devices of its key (in the order
// std::sort leaves them), r the devices per key, distinct the keys. False
// when keys are held by different numbers of devices.
template <class Less, class Equal>
bool group_keys(size_t n, const Less& less, const Equal& equal, std::vector<int64_t>& replica, int64_t& r,
                int64_t& distinct) {
  std::vector<size_t> by_key(n);
  for (size_t i = 0; i < n; ++i) by_key[i] = i;
  std::sort(by_key.begin(), by_key.end(), less);
  replica.assign(n, 0);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && equal(by_key[j], by_key[i])) replica[by_key[j]] = static_cast<int64_t>(j - i), ++j;
    int64_t count = static_cast<int64_t>(j - i);
    if (r >= 0 && count != r) return false;
    r = count;
    ++distinct;
    i = j;
  }
  return true;
}

bool replicas_by_key(const std::vector<int64_t>& keys, size_t width, const std::vector<int64_t>& split,
                     int64_t value_parts, std::vector<int64_t>& replica, int64_t& r, int64_t& distinct) {
  const size_t n = width ? keys.size() / width : 0;
  // Keys in range read as one mixed-radix number each: the same order as
  // comparing them digit by digit, so std::sort leaves the devices in the
  // same order (and the replica numbers the same) at a fraction of the cost.
  std::vector<int64_t> radix(split);
  radix.push_back(value_parts);
  bool codes = true;
  int64_t range = 1;
  for (int64_t x : radix) {
    codes = codes && x > 0 && range <= (int64_t{1} << 62) / x;
    if (codes) range *= x;
  }
  std::vector<int64_t> code(codes ? n : 0);
  for (size_t i = 0; codes && i < n; ++i) {
    int64_t c = 0;
    for (size_t d = 0; d < width && codes; ++d) {
      const int64_t digit = keys[i * width + d];
      codes = digit >= 0 && digit < radix[d];
      c = c * radix[d] + digit;
    }
    code[i] = c;
  }
  if (codes)
    return group_keys(
        n, [&](size_t a, size_t b) { return code[a] < code[b]; },
        [&](size_t a, size_t b) { return code[a] == code[b]; }, replica, r, distinct);
  auto at = [&](size_t i) { return keys.begin() + static_cast<long>(i * width); };
  return group_keys(
      n, [&](size_t a, size_t b) { return std::lexicographical_compare(at(a), at(a + 1), at(b), at(b + 1)); },
      [&](size_t a, size_t b) { return std::equal(at(a), at(a + 1), at(b)); }, replica, r, distinct);
}

}  // namespace

bool layout_of_refs(std::vector<PieceRef>& pieces, const sema::Shape& shape, Layout& out, std::string& why) {
  // One piece per device (several merged, nnScaler's coshard), by device;
  // a device's pieces in the order given.
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const PieceRef& a, const PieceRef& b) { return a.device < b.device; });
  const size_t rank = shape.size();
  std::vector<int> devices;
  std::vector<Held> piece;
  std::vector<int64_t> merged_store;
  if (!held_pieces(pieces, rank, devices, piece, merged_store, why)) return false;
  const Held& p0 = piece[0];
  const size_t n = devices.size();
  std::vector<int64_t> split(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t len = p0.length[d];
    if (len <= 0 || shape[d] % len != 0) {
      why = "pieces do not split dim " + std::to_string(d) + " evenly";
      return false;
    }
    split[d] = shape[d] / len;
  }
  // keys[i * (rank + 1) ..]: device i's block index per dim, then its label.
  const size_t width = rank + 1;
  std::vector<int64_t> blocks(n * rank), labels(n), keys(n * width);
  for (size_t i = 0; i < n; ++i) {
    const Held& s = piece[i];
    if (!std::equal(s.length, s.length + rank, p0.length) || s.value_parts != p0.value_parts) {
      why = "devices hold pieces of different sizes";
      return false;
    }
    for (size_t d = 0; d < rank; ++d) {
      if (s.start[d] % s.length[d] != 0) {
        why = "a piece does not start on a block boundary";
        return false;
      }
      blocks[i * rank + d] = keys[i * width + d] = s.start[d] / s.length[d];
    }
    labels[i] = keys[i * width + rank] = s.value_index;
  }
  // Every (block, partial sum) must be held by the same number of devices.
  std::vector<int64_t> replica;
  int64_t r = -1, distinct = 0;
  if (!replicas_by_key(keys, width, split, p0.value_parts, replica, r, distinct)) {
    why = "pieces are replicated unevenly";
    return false;
  }
  int64_t expected = r * p0.value_parts;
  for (int64_t s : split) expected *= s;
  if (expected != static_cast<int64_t>(n) || distinct * r != expected) {
    why = "the pieces do not cover the tensor exactly once per replica";
    return false;
  }
  // Devices in ascending order, when a layout over that order names their
  // pieces (any D strides, any order of the factors).
  if (fit_blocks(devices, blocks, labels, p0.value_parts, shape, out)) return true;
  // Otherwise the order of the devices is chosen: by replica, partial sum,
  // then block index, outermost first, which is the layout R V D0 D1 ...
  std::vector<std::pair<std::vector<int64_t>, int>> keyed;
  keyed.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> k{replica[i], labels[i]};
    k.insert(k.end(), blocks.begin() + static_cast<long>(i * rank), blocks.begin() + static_cast<long>((i + 1) * rank));
    keyed.push_back({std::move(k), devices[i]});
  }
  std::sort(keyed.begin(), keyed.end());
  out.devices.clear();
  for (auto& [k, dev] : keyed) out.devices.push_back(dev);
  out.factors = {{LayoutFactor::R, -1, r, 0}, {LayoutFactor::V, -1, p0.value_parts, 0}};
  for (size_t d = 0; d < rank; ++d) out.factors.push_back({LayoutFactor::D, static_cast<int>(d), split[d], 0});
  out = normalize(out);
  if (out.factors.empty()) out.factors.push_back({LayoutFactor::R, -1, 1, 0});
  return true;
}

bool layout_of_pieces(const std::vector<std::pair<int, OperandSlice>>& pieces, const sema::Shape& shape, Layout& out,
                      std::string& why) {
  std::vector<PieceRef> refs;
  refs.reserve(pieces.size());
  for (const auto& [dev, s] : pieces) refs.push_back({dev, &s, s.value_index, s.value_parts});
  return layout_of_refs(refs, shape, out, why);
}

namespace {

// (device, slice of operand k) for every device of every leaf of `node`.
std::vector<std::pair<int, OperandSlice>> operand_pieces(const sema::Plan& plan, int node, size_t k,
                                                         std::vector<OperandSlice> sema::SubOp::*side) {
  std::vector<std::pair<int, OperandSlice>> out;
  for (int leaf : plan.leaves_of(node)) {
    const sema::SubOp& s = plan.subops[leaf];
    for (int d : s.devices) out.push_back({d, (s.*side)[k]});
  }
  return out;
}

// The leaves of `leaves` in gradient_pieces' order: by the piece of input k
// they read (start, then length), leaf order within a piece; `groups`
// receives where each run of one piece ends.
std::vector<int> by_piece(const sema::Plan& plan, std::vector<int> leaves, size_t k, std::vector<size_t>& ends) {
  auto slice = [&](int leaf) -> const OperandSlice& { return plan.subops[leaf].inputs[k]; };
  std::stable_sort(leaves.begin(), leaves.end(), [&](int a, int b) {
    const OperandSlice &x = slice(a), &y = slice(b);
    return x.start != y.start ? x.start < y.start : x.length < y.length;
  });
  for (size_t i = 1; i <= leaves.size(); ++i)
    if (i == leaves.size() || !same_ranges(slice(leaves[i - 1]), slice(leaves[i]))) ends.push_back(i);
  return leaves;
}

}  // namespace

std::vector<std::pair<int, OperandSlice>> input_pieces(const sema::Plan& plan, int node, size_t k) {
  return operand_pieces(plan, node, k, &sema::SubOp::inputs);
}

std::vector<std::pair<int, OperandSlice>> output_pieces(const sema::Plan& plan, int node, size_t k) {
  return operand_pieces(plan, node, k, &sema::SubOp::outputs);
}

// The gradient a consumer produces for a parameter piece: distinct sub-ops
// sharing a piece (e.g. batch-split) produce partial sums; the same sub-op
// replicated on several devices produces the same values.
std::vector<std::pair<int, OperandSlice>> gradient_pieces(const sema::Plan& plan, int node, size_t k) {
  std::vector<size_t> ends;
  std::vector<int> leaves = by_piece(plan, plan.leaves_of(node), k, ends);
  std::vector<std::pair<int, OperandSlice>> out;
  for (size_t g = 0, begin = 0; g < ends.size(); begin = ends[g++])
    for (size_t i = begin; i < ends[g]; ++i) {
      OperandSlice s = plan.subops[leaves[i]].inputs[k];
      s.value_parts = static_cast<int64_t>(ends[g] - begin);
      s.value_index = static_cast<int64_t>(i - begin);
      for (int d : plan.subops[leaves[i]].devices) out.push_back({d, s});
    }
  return out;
}

Layout gradient_layout(Layout l) {
  for (LayoutFactor& f : l.factors)
    if (f.kind == LayoutFactor::V) f.kind = LayoutFactor::R;
  return normalize(l);
}

const std::vector<int>& OperandLayouts::leaves(int node) {
  const size_t n = static_cast<size_t>(node);
  if (!leaves_known_[n]) {
    leaves_[n] = plan_.leaves_of(node);
    leaves_known_[n] = 1;
  }
  return leaves_[n];
}

LayoutRead OperandLayouts::read(std::vector<PieceRef>& refs, const sema::Shape& shape) const {
  LayoutRead r;
  r.ok = layout_of_refs(refs, shape, r.layout, r.why);
  return r;
}

LayoutRead OperandLayouts::read_output(int node, size_t o) const {
  std::vector<PieceRef> refs;
  for (int leaf : leaves_[static_cast<size_t>(node)]) {
    const sema::SubOp& s = plan_.subops[leaf];
    const OperandSlice& slice = s.outputs[o];
    for (int d : s.devices) refs.push_back({d, &slice, slice.value_index, slice.value_parts});
  }
  return read(refs, g_.tensor(g_.node(node).outputs[o]).shape);
}

LayoutRead OperandLayouts::read_input(int node, size_t k) const {
  std::vector<PieceRef> refs;
  for (int leaf : leaves_[static_cast<size_t>(node)]) {
    const sema::SubOp& s = plan_.subops[leaf];
    const OperandSlice& slice = s.inputs[k];
    for (int d : s.devices) refs.push_back({d, &slice, slice.value_index, slice.value_parts});
  }
  return read(refs, g_.tensor(g_.node(node).inputs[k]).shape);
}

LayoutRead OperandLayouts::read_gradient(int node, size_t k) const {
  std::vector<size_t> ends;
  std::vector<int> leaves = by_piece(plan_, leaves_[static_cast<size_t>(node)], k, ends);
  std::vector<PieceRef> refs;
  for (size_t g = 0, begin = 0; g < ends.size(); begin = ends[g++])
    for (size_t i = begin; i < ends[g]; ++i) {
      const sema::SubOp& s = plan_.subops[leaves[i]];
      for (int d : s.devices)
        refs.push_back({d, &s.inputs[k], static_cast<int64_t>(i - begin), static_cast<int64_t>(ends[g] - begin)});
    }
  return read(refs, g_.tensor(g_.node(node).inputs[k]).shape);
}

const LayoutRead& OperandLayouts::output(int node, size_t o) {
  auto [it, fresh] = outputs_.emplace(std::make_pair(node, o), LayoutRead{});
  if (fresh) {
    leaves(node);
    it->second = read_output(node, o);
  }
  return it->second;
}

// A read read_all made is taken (each is asked for once); otherwise read now.
LayoutRead OperandLayouts::input(int node, size_t k) {
  auto it = inputs_.find({node, k});
  if (it == inputs_.end()) {
    leaves(node);
    return read_input(node, k);
  }
  LayoutRead r = std::move(it->second);
  inputs_.erase(it);
  return r;
}

LayoutRead OperandLayouts::gradient(int node, size_t k) {
  auto it = gradients_.find({node, k});
  if (it == gradients_.end()) {
    leaves(node);
    return read_gradient(node, k);
  }
  LayoutRead r = std::move(it->second);
  gradients_.erase(it);
  return r;
}

const OperandSlice& OperandLayouts::slice_of(const Request& r, int leaf) const {
  const sema::SubOp& s = plan_.subops[leaf];
  return r.side == Out ? s.outputs[r.k] : s.inputs[r.k];
}

namespace {

// One multiply per word: the hash only groups candidates, which are then
// compared in full, so a weak mix costs at most a read of its own.
void mix(uint64_t& h, uint64_t v) { h = (h + v) * 0x9e3779b97f4a7c15ull; }

const sema::Shape& operand_shape(const sema::Graph& g, int node, bool output, size_t k) {
  const sema::OpNode& op = g.node(node);
  return g.tensor(output ? op.outputs[k] : op.inputs[k]).shape;
}

}  // namespace

uint64_t OperandLayouts::content_hash(const Request& r) const {
  // An output and an input are read alike; a gradient otherwise.
  uint64_t h = r.side == Grad ? 2 : 1;
  for (int64_t x : operand_shape(g_, r.node, r.side == Out, r.k)) mix(h, static_cast<uint64_t>(x));
  for (int leaf : leaves_[static_cast<size_t>(r.node)]) {
    const OperandSlice& s = slice_of(r, leaf);
    const std::vector<int>& devices = plan_.subops[leaf].devices;
    mix(h, devices.size());
    for (int d : devices) mix(h, static_cast<uint64_t>(d));
    mix(h, s.start.size());
    for (int64_t x : s.start) mix(h, static_cast<uint64_t>(x));
    for (int64_t x : s.length) mix(h, static_cast<uint64_t>(x));
    if (r.side == Grad) continue;
    mix(h, static_cast<uint64_t>(s.value_index));
    mix(h, static_cast<uint64_t>(s.value_parts));
  }
  return h;
}

bool OperandLayouts::same_content(const Request& a, const Request& b) const {
  if ((a.side == Grad) != (b.side == Grad)) return false;
  if (operand_shape(g_, a.node, a.side == Out, a.k) != operand_shape(g_, b.node, b.side == Out, b.k)) return false;
  const std::vector<int>& la = leaves_[static_cast<size_t>(a.node)];
  const std::vector<int>& lb = leaves_[static_cast<size_t>(b.node)];
  if (la.size() != lb.size()) return false;
  // Element by element: the arrays are a few words long, where a call to
  // memcmp per array costs more than the comparison.
  auto same = [](const auto& x, const auto& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i]) return false;
    return true;
  };
  for (size_t i = 0; i < la.size(); ++i) {
    const OperandSlice &x = slice_of(a, la[i]), &y = slice_of(b, lb[i]);
    if (!same(plan_.subops[la[i]].devices, plan_.subops[lb[i]].devices) || !same(x.start, y.start) ||
        !same(x.length, y.length))
      return false;
    if (a.side != Grad && (x.value_index != y.value_index || x.value_parts != y.value_parts)) return false;
  }
  return true;
}

std::pair<size_t, size_t> OperandLayouts::read_all(bool gradients, OperandReads* keep) {
  std::vector<int> nodes;
  for (size_t node = 0; node < plan_.root_of_node.size(); ++node)
    if (plan_.root_of_node[node] >= 0 && !leaves_known_[node]) nodes.push_back(static_cast<int>(node));
  parallel_for(nodes.size(), [&](size_t i) { leaves_[static_cast<size_t>(nodes[i])] = plan_.leaves_of(nodes[i]); });
  for (int n : nodes) leaves_known_[static_cast<size_t>(n)] = 1;
  std::vector<Request> requests;
  for (size_t node = 0; node < plan_.root_of_node.size(); ++node) {
    if (plan_.root_of_node[node] < 0) continue;
    const int n = static_cast<int>(node);
    const sema::OpNode& op = g_.node(n);
    for (size_t o = 0; o < op.outputs.size(); ++o)
      if (!outputs_.count({n, o})) requests.push_back({Out, n, o});
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      requests.push_back({In, n, k});
      const sema::TensorInfo& t = g_.tensor(op.inputs[k]);
      if (gradients && sema::dtype_is_float(t.dtype) && t.kind != sema::TensorKind::Input)
        requests.push_back({Grad, n, k});
    }
  }
  // Each request's first request of equal hash (in request order) reads for
  // both, once the two are found equal in full; a request whose content
  // differs after all (a hash collision) reads its own.
  std::vector<uint64_t> hash(requests.size());
  parallel_for(requests.size(), [&](size_t i) {
    sema::CheckDeadline::poll();
    hash[i] = content_hash(requests[i]);
    hash[i] ^= hash[i] >> 29;
  });
  std::unordered_map<uint64_t, size_t> first_of_hash;
  std::vector<size_t> source(requests.size()), readers;
  for (size_t i = 0; i < requests.size(); ++i) {
    source[i] = first_of_hash.emplace(hash[i], i).first->second;
    if (source[i] == i) readers.push_back(i);
  }
  std::vector<LayoutRead> done(requests.size());
  auto read_request = [&](size_t i) {
    sema::CheckDeadline::poll();
    const Request& r = requests[i];
    done[i] = r.side == Out  ? read_output(r.node, r.k)
              : r.side == In ? read_input(r.node, r.k)
                             : read_gradient(r.node, r.k);
  };
  parallel_for(readers.size(), [&](size_t j) { read_request(readers[j]); });
  parallel_for(requests.size(), [&](size_t i) {
    if (source[i] == i) return;
    if (same_content(requests[i], requests[source[i]])) {
      done[i] = done[source[i]];
    } else {
      read_request(i);
      source[i] = i;
    }
  });
  size_t ran = 0;
  for (size_t i = 0; i < requests.size(); ++i) ran += source[i] == i;
  if (keep) {
    keep->nodes_ = g_.nodes().size();
    keep->subops_ = plan_.subops.size();
    keep->plan_ = plan_.name;
    std::unordered_map<size_t, uint32_t> index_of_source;
    for (size_t i = 0; i < requests.size(); ++i) {
      const Request& r = requests[i];
      if (r.side == Grad) continue;
      auto [it, fresh] = index_of_source.emplace(source[i], static_cast<uint32_t>(keep->distinct_.size()));
      if (fresh) keep->distinct_.push_back(done[source[i]]);
      (r.side == Out ? keep->out_ : keep->in_)[OperandReads::key(r.node, r.k)] = it->second;
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    auto& into = r.side == Out ? outputs_ : r.side == In ? inputs_ : gradients_;
    into[{r.node, r.k}] = std::move(done[i]);
  }
  return {ran, requests.size()};
}

}  // namespace nns::backend
