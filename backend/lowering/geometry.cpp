#include "backend/lowering/geometry.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace nns::backend {

int64_t Piece::numel() const {
  int64_t n = 1;
  for (int64_t l : length) n *= l;
  return n;
}

bool same_piece(const Piece& a, const Piece& b) {
  return a.same_box(b) && a.value_index == b.value_index && a.value_parts == b.value_parts &&
         a.replica_index == b.replica_index && a.replicas == b.replicas;
}

bool same_pieces(const std::vector<Piece>& a, const std::vector<Piece>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_piece(a[i], b[i])) return false;
  return true;
}

bool region_view(const Piece& have, const Piece& want, int64_t& offset, int64_t& row_stride) {
  const size_t rank = have.length.size();
  if (want.length.size() != rank || want.start.size() != rank || have.start.size() != rank) return false;
  for (size_t x = 0; x < rank; ++x)
    if (want.start[x] < have.start[x] || want.start[x] + want.length[x] > have.start[x] + have.length[x]) return false;
  auto contiguous_over = [&](size_t dims) {
    size_t d = 0;
    while (d < dims && want.length[d] == 1) ++d;
    for (size_t x = d + 1; x < dims; ++x)
      if (want.length[x] != have.length[x]) return false;
    return true;
  };
  row_stride = 0;
  if (!contiguous_over(rank)) {
    if (rank < 2 || !contiguous_over(rank - 1)) return false;
    row_stride = have.length[rank - 1];
  }
  offset = 0;
  int64_t stride = 1;
  for (size_t x = rank; x-- > 0;) {
    offset += (want.start[x] - have.start[x]) * stride;
    stride *= have.length[x];
  }
  return true;
}

Piece piece_of(const Layout& l, int device, const sema::Shape& shape) {
  // Layouts list their devices in ascending order (they come from ordered
  // maps): a binary search, with a linear one for any other order. Checks of
  // 1024-device plans call this for every device of every edge.
  auto it = std::lower_bound(l.devices.begin(), l.devices.end(), device);
  if (it == l.devices.end() || *it != device) it = std::find(l.devices.begin(), l.devices.end(), device);
  if (it == l.devices.end()) throw std::logic_error("internal: device " + std::to_string(device) + " is not in " + l.to_string());
  int64_t pos = it - l.devices.begin();
  // Scratch reused across calls: lowering 1024 ranks calls this millions of times.
  static thread_local std::vector<int64_t> digit, index, split;
  digit.assign(l.factors.size(), 0);
  for (size_t i = l.factors.size(); i-- > 0;) {
    digit[i] = pos % l.factors[i].n;
    pos /= l.factors[i].n;
  }
  Piece p;
  size_t rank = shape.size();
  index.assign(rank, 0);
  split.assign(rank, 1);
  // Digits of one kind compose outermost first: D digits of one dim give
  // the block index along it, V digits the value part, R digits the copy.
  for (size_t i = 0; i < l.factors.size(); ++i) {
    const LayoutFactor& f = l.factors[i];
    if (f.kind == LayoutFactor::D) {
      // A stride says what the digit weighs in the block index; without one
      // (a layout not normalised) outer digits weigh more.
      index[f.dim] = f.stride > 0 ? index[f.dim] + digit[i] * f.stride : index[f.dim] * f.n + digit[i];
      split[f.dim] *= f.n;
    } else if (f.kind == LayoutFactor::V) {
      p.value_index = p.value_index * f.n + digit[i];
      p.value_parts *= f.n;
    } else {
      p.replica_index = p.replica_index * f.n + digit[i];
      p.replicas *= f.n;
    }
  }
  p.start.resize(rank);
  p.length.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t len = shape[d] / split[d];
    p.start[d] = index[d] * len;
    p.length[d] = len;
  }
  return p;
}

bool holds(const Layout& l, int device) {
  // Ascending device lists (the usual case) answer by binary search; the
  // linear search covers any other order.
  auto it = std::lower_bound(l.devices.begin(), l.devices.end(), device);
  if (it != l.devices.end() && *it == device) return true;
  return std::find(l.devices.begin(), l.devices.end(), device) != l.devices.end();
}

Piece piece_of_slice(const sema::OperandSlice& s) {
  Piece p;
  p.start = s.start;
  p.length = s.length;
  p.value_index = s.value_index;
  p.value_parts = s.value_parts;
  return p;
}

Piece full_piece(const sema::Shape& shape) {
  Piece p;
  p.start.assign(shape.size(), 0);
  p.length = shape;
  return p;
}

bool contains(const Piece& outer, const std::vector<int64_t>& start, const std::vector<int64_t>& length) {
  for (size_t d = 0; d < start.size(); ++d)
    if (start[d] < outer.start[d] || start[d] + length[d] > outer.start[d] + outer.length[d]) return false;
  return true;
}

bool intersect(const Piece& a, const Piece& b, std::vector<int64_t>& start, std::vector<int64_t>& length) {
  start.resize(a.start.size());
  length.resize(a.start.size());
  for (size_t d = 0; d < a.start.size(); ++d) {
    int64_t lo = std::max(a.start[d], b.start[d]), hi = std::min(a.start[d] + a.length[d], b.start[d] + b.length[d]);
    if (hi <= lo) return false;
    start[d] = lo;
    length[d] = hi - lo;
  }
  return true;
}

std::string region_text(const std::vector<int64_t>& start, const std::vector<int64_t>& length) {
  std::string s = "[";
  for (size_t d = 0; d < start.size(); ++d) s += (d ? ", " : "") + std::to_string(start[d]) + ":" + std::to_string(start[d] + length[d]);
  return s + "]";
}

std::string group_text(const std::vector<int>& g) {
  std::string s = "{";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "}";
}

std::vector<TransferPart> transfer_parts(const AdapterStep& st, const Layout& before, int device, const sema::Shape& shape) {
  std::vector<TransferPart> parts;
  if (!holds(st.after, device)) return parts;
  Piece want = piece_of(st.after, device, shape);
  for (const auto& pair : st.groups) {
    if (pair.size() != 2 || pair[1] != device) continue;
    Piece have = piece_of(before, pair[0], shape);
    TransferPart part;
    part.from = pair[0];
    if (have.value_parts != want.value_parts || have.value_index != want.value_index) continue;
    if (!intersect(have, want, part.box.start, part.box.length)) continue;
    part.box.value_index = want.value_index;
    part.box.value_parts = want.value_parts;
    parts.push_back(std::move(part));
  }
  return parts;
}

bool tiles(const Piece& want, const std::vector<TransferPart>& parts) {
  int64_t covered = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!contains(want, parts[i].box.start, parts[i].box.length)) return false;
    covered += parts[i].box.numel();
    for (size_t j = 0; j < i; ++j) {
      std::vector<int64_t> s, l;
      if (intersect(parts[i].box, parts[j].box, s, l)) return false;
    }
  }
  return covered == want.numel();
}

namespace {

// Fits digits, innermost first, to per-position block indices and labels
// (flat arrays: blocks[pos * rank + d]). Positions p and p + k*s differ in
// one digit only when every other digit is equal, which is what the checks
// below compare.
struct Fitter {
  const std::vector<int64_t>& blocks;
  const std::vector<int64_t>& labels;
  size_t rank, n;
  std::vector<LayoutFactor> digits;  // innermost first

  int64_t block(size_t pos, size_t d) const { return blocks[pos * rank + d]; }
  bool same_box(size_t a, size_t b) const {
    for (size_t d = 0; d < rank; ++d)
      if (block(a, d) != block(b, d)) return false;
    return true;
  }

  // Tries digit size p at position stride s: which kind it is, read off the
  // first p positions, then checked on every position.
  bool digit(int64_t s, int64_t p, LayoutFactor& out) const {
    size_t s1 = static_cast<size_t>(s);
    int changed = -1;
    for (size_t d = 0; d < rank; ++d)
      if (block(s1, d) != block(0, d)) {
        if (changed >= 0) return false;
        changed = static_cast<int>(d);
      }
    if (changed >= 0) {
      int64_t delta = block(s1, static_cast<size_t>(changed)) - block(0, static_cast<size_t>(changed));
      if (delta <= 0) return false;
      out = {LayoutFactor::D, changed, p, delta};
    } else {
      out = {LayoutFactor::R, -1, p, 0};
      for (int64_t k = 1; k < p; ++k)
        if (labels[static_cast<size_t>(k * s)] != labels[0]) out.kind = LayoutFactor::V;
    }
    for (size_t pos = 0; pos < n; ++pos) {
      int64_t k = (static_cast<int64_t>(pos) / s) % p;
      if (k == 0) continue;
      size_t base = pos - static_cast<size_t>(k * s);
      switch (out.kind) {
        case LayoutFactor::D:
          for (size_t d = 0; d < rank; ++d)
            if (block(pos, d) != block(base, d) + (static_cast<int>(d) == out.dim ? k * out.stride : 0)) return false;
          if (labels[pos] != labels[base]) return false;
          break;
        case LayoutFactor::R:
          if (!same_box(pos, base) || labels[pos] != labels[base]) return false;
          break;
        case LayoutFactor::V:
          if (!same_box(pos, base)) return false;
          for (int64_t j = 0; j < k; ++j)
            if (labels[pos] == labels[base + static_cast<size_t>(j * s)]) return false;
          break;
      }
    }
    return true;
  }

  bool fit(int64_t s, int64_t rest) {
    if (rest == 1) return true;
    for (int64_t p = 2; p <= rest; ++p) {
      if (rest % p) continue;
      bool prime = true;
      for (int64_t q = 2; q * q <= p && prime; ++q) prime = p % q != 0;
      if (!prime) continue;
      LayoutFactor f;
      if (!digit(s, p, f)) continue;
      digits.push_back(f);
      if (fit(s * p, rest / p)) return true;
      digits.pop_back();
    }
    return false;
  }
};

}  // namespace

bool fit_blocks(const std::vector<int>& order, const std::vector<int64_t>& blocks, const std::vector<int64_t>& labels, int64_t value_parts,
                const sema::Shape& shape, Layout& out) {
  const size_t n = order.size(), rank = shape.size();
  if (n == 0 || labels.size() != n || blocks.size() != n * rank) return false;
  Fitter fit{blocks, labels, rank, n, {}};
  if (!fit.fit(1, static_cast<int64_t>(n))) return false;
  Layout l;
  l.devices = order;
  for (size_t i = fit.digits.size(); i-- > 0;) l.factors.push_back(fit.digits[i]);
  if (l.factors.empty()) l.factors.push_back({LayoutFactor::R, -1, 1, 0});
  l = normalize(l);
  // The digits were checked position by position; what is left: the splits
  // divide the tensor and the block counts match, and the devices of one
  // box hold `parts` distinct labels (R digits keep labels and V digits
  // change them, so that holds exactly when each V class is complete).
  int64_t parts = 1;
  std::vector<int64_t> split(rank, 1);
  for (const LayoutFactor& f : l.factors) {
    if (f.kind == LayoutFactor::V) parts *= f.n;
    if (f.kind == LayoutFactor::D) split[static_cast<size_t>(f.dim)] *= f.n;
  }
  if (parts != value_parts) return false;
  for (size_t d = 0; d < rank; ++d)
    if (shape[d] % split[d] != 0) return false;
  for (size_t pos = 0; pos < n; ++pos)
    for (size_t d = 0; d < rank; ++d)
      if (blocks[pos * rank + d] < 0 || blocks[pos * rank + d] >= split[d]) return false;
  if (parts > 1) {
    std::vector<std::pair<std::vector<int64_t>, int64_t>> box_label;
    box_label.reserve(n);
    for (size_t pos = 0; pos < n; ++pos)
      box_label.push_back({std::vector<int64_t>(blocks.begin() + static_cast<long>(pos * rank), blocks.begin() + static_cast<long>((pos + 1) * rank)), labels[pos]});
    std::sort(box_label.begin(), box_label.end());
    box_label.erase(std::unique(box_label.begin(), box_label.end()), box_label.end());
    std::map<std::vector<int64_t>, int64_t> distinct;
    for (auto& [box, label] : box_label) ++distinct[box];
    for (auto& [box, count] : distinct)
      if (count != parts) return false;
  }
  out = std::move(l);
  return true;
}

bool fit_layout(const std::vector<int>& order, const std::vector<Piece>& pieces, const sema::Shape& shape, Layout& out) {
  if (order.empty() || order.size() != pieces.size()) return false;
  const size_t rank = shape.size();
  std::vector<int64_t> blocks(order.size() * rank), labels(order.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.length != pieces[0].length || p.value_parts != pieces[0].value_parts) return false;
    for (size_t d = 0; d < rank; ++d) {
      if (p.length[d] <= 0 || p.start[d] % p.length[d] != 0) return false;
      blocks[i * rank + d] = p.start[d] / p.length[d];
    }
    labels[i] = p.value_index;
  }
  for (size_t d = 0; d < rank; ++d)
    if (pieces[0].length[d] * 1 > shape[d] || shape[d] % pieces[0].length[d] != 0) return false;
  Layout l;
  if (!fit_blocks(order, blocks, labels, pieces[0].value_parts, shape, l)) return false;
  // The block length the layout implies must be the pieces' own.
  Piece p0 = piece_of(l, order[0], shape);
  if (p0.length != pieces[0].length) return false;
  out = std::move(l);
  return true;
}

}  // namespace nns::backend
