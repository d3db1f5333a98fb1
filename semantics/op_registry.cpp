// Registry rows of the primitive ops. Annotation generators follow
// nnScaler's conventions for argument-dependent ops: a reduced dim is '+',
// dims an op moves data along (roll, concat, pad) are '^', everything else
// spatial; reshape groups dims by matching products, as nnScaler does.
#include "semantics/op_registry.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "semantics/plan.h"

namespace nns::sema {

int64_t OpCall::int_attr(const std::string& name) const {
  auto it = attrs->find(name);
  if (it == attrs->end()) throw OpArgError{"missing argument '" + name + "'"};
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
  if (auto* b = std::get_if<bool>(&it->second)) return *b;
  throw OpArgError{"argument '" + name + "' must be an int"};
}

std::vector<int64_t> OpCall::ints_attr(const std::string& name) const {
  auto it = attrs->find(name);
  if (it == attrs->end()) throw OpArgError{"missing argument '" + name + "'"};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return {*i};
  throw OpArgError{"argument '" + name + "' must be a list of ints"};
}

bool OpCall::bool_attr(const std::string& name, bool fallback) const {
  auto it = attrs->find(name);
  if (it == attrs->end()) return fallback;
  if (auto* b = std::get_if<bool>(&it->second)) return *b;
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i != 0;
  throw OpArgError{"argument '" + name + "' must be a bool"};
}

namespace {

// Fresh identifier names for generated annotations: a..z, then a1..z1, ...
std::string id_name(int i) {
  std::string s(1, static_cast<char>('a' + i % 26));
  if (i >= 26) s += std::to_string(i / 26);
  return s;
}

std::string join(const std::vector<std::string>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " " : "") + dims[i];
  return s;
}

int64_t norm_axis(int64_t axis, size_t rank, const char* what) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw OpArgError{std::string(what) + " " + std::to_string(axis) + " is out of range for a rank-" +
                     std::to_string(rank) + " tensor"};
  return axis < 0 ? axis + r : axis;
}

const Shape& tensor_shape(const OpCall& c, size_t i) {
  if (i >= c.inputs.size()) throw OpArgError{"missing tensor operand " + std::to_string(i)};
  return c.inputs[i].shape;
}

// ---- generators ---------------------------------------------------------------

// Elementwise ops with numpy broadcasting over k operands (add, maximum,
// where...): every operand aligned from the right; a size-1 dim facing a larger one is the
// literal 1 (frozen) on its side.
GeneratedAnno broadcast(const OpCall& c, size_t k) {
  size_t rank = 0;
  for (size_t i = 0; i < k; ++i) rank = std::max(rank, tensor_shape(c, i).size());
  std::vector<std::vector<std::string>> ins(k);
  std::vector<std::string> out;
  for (size_t j = 0; j < rank; ++j) {
    // j counts from the left of the broadcast result; -1: the operand has no such dim.
    std::vector<int64_t> d(k);
    int64_t size = 1;
    size_t sized = 0;  // the first operand whose dim there is larger than 1
    for (size_t i = 0; i < k; ++i) {
      const Shape& x = c.inputs[i].shape;
      int64_t xi = static_cast<int64_t>(j) - static_cast<int64_t>(rank - x.size());
      d[i] = xi >= 0 ? x[xi] : -1;
      if (d[i] < 0 || d[i] == 1) continue;
      if (size > 1 && d[i] != size)
        throw OpArgError{"cannot broadcast shapes " + shape_to_string(c.inputs[sized].shape) + " and " + shape_to_string(x) + " (dim " +
                         std::to_string(j) + ": " + std::to_string(size) + " vs " + std::to_string(d[i]) + ")"};
      if (size == 1) sized = i;
      size = d[i];
    }
    std::string id = size == 1 ? "1" : id_name(static_cast<int>(j));
    for (size_t i = 0; i < k; ++i)
      if (d[i] >= 0) ins[i].push_back(d[i] == 1 ? "1" : id);
    out.push_back(id);
  }
  std::string text;
  for (size_t i = 0; i < k; ++i) text += join(ins[i]) + ", ";
  text.replace(text.size() - 2, 2, " -> ");
  return {text + join(out), {}};
}

// A reduction over attr `dim` (keepdim: a 1 left in its place). sum and
// mean mark the reduced dim '+' (a split gives partial sums); max, min and
// argmax '^' (partial maxima are no partial sums).
GeneratedAnno broadcast_binary(const OpCall& c) { return broadcast(c, 2); }
GeneratedAnno broadcast_ternary(const OpCall& c) { return broadcast(c, 3); }

GeneratedAnno reduce_dim_marked(const OpCall& c, const char* mark) {
  const Shape& x = tensor_shape(c, 0);
  int64_t dim = norm_axis(c.int_attr("dim"), x.size(), "dim");
  bool keep = c.bool_attr("keepdim");
  std::vector<std::string> in, out;
  for (size_t i = 0; i < x.size(); ++i) {
    std::string id = x[i] == 1 ? "1" : id_name(static_cast<int>(i));
    if (static_cast<int64_t>(i) == dim) {
      in.push_back(x[i] == 1 ? "1" : id + mark);
      if (keep) out.push_back("1");
    } else {
      in.push_back(id);
      out.push_back(id);
    }
  }
  if (out.empty()) out.push_back("1");
  return {join(in) + " -> " + join(out), {}};
}
GeneratedAnno reduce_dim(const OpCall& c) { return reduce_dim_marked(c, "+"); }
GeneratedAnno reduce_dim_frozen(const OpCall& c) { return reduce_dim_marked(c, "^"); }

// reshape / view: group input and output dims whose products match.
GeneratedAnno reshape(const OpCall& c) {
  const Shape& in = tensor_shape(c, 0);
  std::vector<int64_t> target = c.ints_attr("shape");
  int64_t total = numel(in), known = 1;
  int infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (infer >= 0) throw OpArgError{"reshape: only one dimension can be -1"};
      infer = static_cast<int>(i);
    } else if (target[i] <= 0) {
      throw OpArgError{"reshape: dimension " + std::to_string(target[i]) + " is not positive"};
    } else {
      known *= target[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      throw OpArgError{"reshape: cannot infer -1 for " + shape_to_string(in) + " -> " + shape_to_string(target)};
    target[infer] = total / known;
  }
  if (numel(target) != total)
    throw OpArgError{"cannot reshape " + shape_to_string(in) + " (" + std::to_string(total) + " elements) to " +
                     shape_to_string(target) + " (" + std::to_string(numel(target)) + " elements)"};
  GeneratedAnno g;
  std::vector<std::string> ins, outs;
  size_t i = 0, j = 0;
  int next = 0;
  while (i < in.size() || j < target.size()) {
    if (i < in.size() && in[i] == 1) { ins.push_back("1"); ++i; continue; }
    if (j < target.size() && target[j] == 1) { outs.push_back("1"); ++j; continue; }
    size_t i0 = i, j0 = j;
    int64_t pi = in[i++], pj = target[j++];
    while (pi != pj) {
      if (pi < pj) pi *= in[i++];
      else pj *= target[j++];
    }
    size_t n_in = i - i0, n_out = j - j0;
    if (n_in == 1 && n_out == 1) {
      std::string id = id_name(next++);
      ins.push_back(id);
      outs.push_back(id);
    } else if (n_in == 1 || n_out == 1) {
      // One side is the product of the other: a hidden-dim bracket.
      const Shape& many = n_in == 1 ? target : in;
      size_t start = n_in == 1 ? j0 : i0, count = n_in == 1 ? n_out : n_in;
      std::vector<std::string> ids;
      for (size_t k = 0; k < count; ++k) {
        std::string id = id_name(next++);
        ids.push_back(id);
        g.sizes[id] = many[start + k];
      }
      std::string bracket = "(" + join(ids) + ")";
      if (n_in == 1) { ins.push_back(bracket); for (auto& id : ids) outs.push_back(id); }
      else { for (auto& id : ids) ins.push_back(id); outs.push_back(bracket); }
    } else {
      for (size_t k = i0; k < i; ++k) ins.push_back(std::to_string(in[k]));
      for (size_t k = j0; k < j; ++k) outs.push_back(std::to_string(target[k]));
    }
  }
  if (ins.empty()) ins.push_back("1");
  if (outs.empty()) outs.push_back("1");
  g.text = join(ins) + " -> " + join(outs);
  return g;
}

GeneratedAnno permute_dims(const Shape& x, const std::vector<int64_t>& perm) {
  if (perm.size() != x.size())
    throw OpArgError{"permute: " + std::to_string(perm.size()) + " dims given for a rank-" + std::to_string(x.size()) + " tensor"};
  std::vector<std::string> in, out;
  std::set<int64_t> seen;
  for (size_t i = 0; i < x.size(); ++i) in.push_back(id_name(static_cast<int>(i)));
  for (int64_t p : perm) {
    int64_t a = norm_axis(p, x.size(), "permute dim");
    if (!seen.insert(a).second) throw OpArgError{"permute: dim " + std::to_string(p) + " appears twice"};
    out.push_back(in[a]);
  }
  return {join(in) + " -> " + join(out), {}};
}

GeneratedAnno permute(const OpCall& c) { return permute_dims(tensor_shape(c, 0), c.ints_attr("dims")); }

GeneratedAnno transpose(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  std::vector<int64_t> perm(x.size());
  for (size_t i = 0; i < x.size(); ++i) perm[i] = static_cast<int64_t>(i);
  int64_t a = norm_axis(c.int_attr("dim0"), x.size(), "dim0");
  int64_t b = norm_axis(c.int_attr("dim1"), x.size(), "dim1");
  std::swap(perm[a], perm[b]);
  return permute_dims(x, perm);
}

// roll: rolled dims move data across any split, so they are frozen.
GeneratedAnno roll(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  std::vector<int64_t> shifts = c.ints_attr("shifts"), dims = c.ints_attr("dims");
  if (shifts.size() != dims.size()) throw OpArgError{"roll: shifts and dims must have the same length"};
  std::vector<bool> rolled(x.size(), false);
  for (int64_t d : dims) rolled[norm_axis(d, x.size(), "roll dim")] = true;
  std::vector<std::string> ids;
  for (size_t i = 0; i < x.size(); ++i) ids.push_back(id_name(static_cast<int>(i)) + (rolled[i] ? "^" : ""));
  return {join(ids) + " -> " + join(ids), {}};
}

GeneratedAnno concat(const OpCall& c) {
  if (c.inputs.empty()) throw OpArgError{"concat needs at least one tensor"};
  const Shape& x0 = tensor_shape(c, 0);
  int64_t dim = norm_axis(c.int_attr("dim"), x0.size(), "dim");
  GeneratedAnno g;
  std::vector<std::string> operands;
  int64_t total = 0;
  for (size_t t = 0; t < c.inputs.size(); ++t) {
    const Shape& x = c.inputs[t].shape;
    if (x.size() != x0.size()) throw OpArgError{"concat: tensor " + std::to_string(t) + " has rank " + std::to_string(x.size()) + ", expected " + std::to_string(x0.size())};
    // Checked here so the message speaks of dims, not generated identifiers.
    for (size_t i = 0; i < x.size(); ++i)
      if (static_cast<int64_t>(i) != dim && x[i] != x0[i])
        throw OpArgError{"concat: tensor " + std::to_string(t) + " has shape " + shape_to_string(x) + " but tensor 0 has " +
                         shape_to_string(x0) + "; only dim " + std::to_string(dim) + " may differ"};
    std::vector<std::string> ids;
    for (size_t i = 0; i < x.size(); ++i) {
      if (static_cast<int64_t>(i) == dim) {
        ids.push_back("c" + std::to_string(t) + "^");
        total += x[i];
      } else {
        ids.push_back(id_name(static_cast<int>(i)));
      }
    }
    operands.push_back(join(ids));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < x0.size(); ++i) out.push_back(static_cast<int64_t>(i) == dim ? "cat^" : id_name(static_cast<int>(i)));
  g.sizes["cat"] = total;
  std::string s;
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i];
  g.text = s + " -> " + join(out);
  return g;
}

GeneratedAnno split_sizes(const Shape& x, int64_t dim, const std::vector<int64_t>& sizes) {
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s <= 0) throw OpArgError{"split: piece size " + std::to_string(s) + " is not positive"};
    sum += s;
  }
  if (sum != x[dim]) throw OpArgError{"split: sizes add up to " + std::to_string(sum) + " but dim " + std::to_string(dim) + " is " + std::to_string(x[dim])};
  GeneratedAnno g;
  std::vector<std::string> in;
  for (size_t i = 0; i < x.size(); ++i) in.push_back(static_cast<int64_t>(i) == dim ? "s^" : id_name(static_cast<int>(i)));
  std::string outs;
  for (size_t p = 0; p < sizes.size(); ++p) {
    std::vector<std::string> o = in;
    std::string id = "p" + std::to_string(p);
    o[dim] = id + "^";
    g.sizes[id] = sizes[p];
    outs += (p ? ", " : "") + join(o);
  }
  g.text = join(in) + " -> " + outs;
  return g;
}

GeneratedAnno split(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  return split_sizes(x, norm_axis(c.int_attr("dim"), x.size(), "dim"), c.ints_attr("sizes"));
}

GeneratedAnno chunk(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  int64_t dim = norm_axis(c.int_attr("dim"), x.size(), "dim");
  int64_t n = c.int_attr("chunks");
  if (n <= 0 || x[dim] % n != 0)
    throw OpArgError{"chunk: " + std::to_string(x[dim]) + " does not divide into " + std::to_string(n) + " equal chunks"};
  return split_sizes(x, dim, std::vector<int64_t>(n, x[dim] / n));
}

// pad: pads = [before0, after0, before1, after1, ...] in dim order; padded dims are frozen.
GeneratedAnno pad(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  std::vector<int64_t> pads = c.ints_attr("pads");
  if (pads.size() != 2 * x.size())
    throw OpArgError{"pad: expected " + std::to_string(2 * x.size()) + " values (before/after per dim), got " + std::to_string(pads.size())};
  GeneratedAnno g;
  std::vector<std::string> in, out;
  for (size_t i = 0; i < x.size(); ++i) {
    std::string id = id_name(static_cast<int>(i));
    if (pads[2 * i] < 0 || pads[2 * i + 1] < 0) throw OpArgError{"pad: negative padding"};
    if (pads[2 * i] == 0 && pads[2 * i + 1] == 0) {
      in.push_back(id);
      out.push_back(id);
    } else {
      in.push_back(id + "^");
      out.push_back("o" + id + "^");
      g.sizes["o" + id] = x[i] + pads[2 * i] + pads[2 * i + 1];
    }
  }
  g.text = join(in) + " -> " + join(out);
  return g;
}

GeneratedAnno conv2d_impl(const OpCall& c, bool bias) {
  const Shape& x = tensor_shape(c, 0);
  const Shape& w = tensor_shape(c, 1);
  if (x.size() != 4 || w.size() != 4) throw OpArgError{"conv2d expects x [n, c, h, w] and weight [o, c, kh, kw]"};
  int64_t stride = c.int_attr("stride"), padding = c.int_attr("padding");
  if (stride <= 0 || padding < 0) throw OpArgError{"conv2d: stride must be positive and padding non-negative"};
  int64_t oh = (x[2] + 2 * padding - w[2]) / stride + 1, ow = (x[3] + 2 * padding - w[3]) / stride + 1;
  if (oh <= 0 || ow <= 0) throw OpArgError{"conv2d: kernel larger than the padded input"};
  // With a bias, splitting the input channels would add the bias once per partial sum.
  std::string ic = bias ? "ic^" : "ic+";
  GeneratedAnno g;
  g.text = "n " + ic + " h^ w^, oc " + ic + " kh^ kw^" + (bias ? ", oc" : "") + " -> n oc oh^ ow^";
  g.sizes = {{"oh", oh}, {"ow", ow}};
  return g;
}
GeneratedAnno conv2d(const OpCall& c) { return conv2d_impl(c, false); }
GeneratedAnno conv2d_bias(const OpCall& c) { return conv2d_impl(c, true); }

// ---- 2-d pooling (max_pool2d, avg_pool2d) -------------------------------------
// x [n, c, h, w] -> [n, c, oh, ow]: a square kernel, one stride, symmetric
// padding. Each channel is pooled on its own, so n and c split; the
// spatial dims are frozen (a split would cut windows).
GeneratedAnno pool2d(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  if (x.size() != 4) throw OpArgError{"pooling expects x [n, c, h, w], got a rank-" + std::to_string(x.size()) + " tensor"};
  int64_t k = c.int_attr("kernel"), stride = c.int_attr("stride"), padding = c.int_attr("padding");
  if (k <= 0 || stride <= 0 || padding < 0) throw OpArgError{"pooling: kernel and stride must be positive and padding non-negative"};
  // As PyTorch: larger padding would give windows of padding only.
  if (2 * padding > k) throw OpArgError{"pooling: padding " + std::to_string(padding) + " exceeds half the kernel " + std::to_string(k)};
  int64_t oh = (x[2] + 2 * padding - k) / stride + 1, ow = (x[3] + 2 * padding - k) / stride + 1;
  if (oh <= 0 || ow <= 0) throw OpArgError{"pooling: kernel larger than the padded input"};
  return {"n c h^ w^ -> n c oh^ ow^", {{"oh", oh}, {"ow", ow}}};
}

int64_t pool_macs(const BoundAnno& b, const OpCall& c) { return numel(b.output_shapes.at(0)) * c.int_attr("kernel") * c.int_attr("kernel"); }
// ---- end of pooling --------------------------------------------------------------

// index_select(table [t, ...], idx [...]) -> [idx..., ...]
GeneratedAnno index_select(const OpCall& c) {
  const Shape& table = tensor_shape(c, 0);
  const Shape& idx = tensor_shape(c, 1);
  if (table.empty()) throw OpArgError{"index_select: the table must have at least one dim"};
  std::vector<std::string> t{"t^"}, ix, out;
  for (size_t i = 0; i < idx.size(); ++i) { ix.push_back("i" + std::to_string(i)); out.push_back(ix.back()); }
  for (size_t i = 1; i < table.size(); ++i) { t.push_back("r" + std::to_string(i)); out.push_back(t.back()); }
  return {join(t) + ", " + join(ix) + " -> " + join(out), {}};
}

GeneratedAnno mse(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  std::vector<std::string> ids;
  for (size_t i = 0; i < x.size(); ++i) ids.push_back(id_name(static_cast<int>(i)) + "+");
  return {join(ids) + ", " + join(ids) + " -> 1", {}};
}

// Constant generators (no tensor inputs): sizes come from the arguments.
GeneratedAnno swin_relative_index(const OpCall& c) {
  int64_t w = c.int_attr("window");
  if (w <= 0) throw OpArgError{"window must be positive"};
  return {"-> n^", {{"n", w * w * w * w}}};
}

GeneratedAnno swin_shift_mask(const OpCall& c) {
  int64_t h = c.int_attr("height"), w = c.int_attr("width"), win = c.int_attr("window");
  if (win <= 0 || h % win != 0 || w % win != 0)
    throw OpArgError{"shift mask: window " + std::to_string(win) + " must divide the resolution " + std::to_string(h) + "x" + std::to_string(w)};
  return {"-> nw^ n^ m^", {{"nw", (h / win) * (w / win)}, {"n", win * win}, {"m", win * win}}};
}

// full(shape, value): a constant of the given shape. Its dims are frozen,
// as every constant generator's: a plan replicates it.
GeneratedAnno full(const OpCall& c) {
  std::vector<int64_t> shape = c.ints_attr("shape");
  if (shape.empty()) throw OpArgError{"full: the shape needs at least one dim"};
  GeneratedAnno g;
  std::vector<std::string> out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) throw OpArgError{"full: dim " + std::to_string(shape[i]) + " of the shape is not positive"};
    if (shape[i] == 1) {
      out.push_back("1");
      continue;
    }
    std::string id = id_name(static_cast<int>(i));
    g.sizes[id] = shape[i];
    out.push_back(id + "^");
  }
  g.text = "-> " + join(out);
  return g;
}

// arange(n): "-> n^", n taken from the argument of that name (so a
// symbolic n stays symbolic); checked positive here.
GeneratedAnno arange(const OpCall& c) {
  int64_t n = c.int_attr("n");
  if (n <= 0) throw OpArgError{"arange: n must be positive (got " + std::to_string(n) + ")"};
  return {"-> n^", {}};
}

// T5's relative position buckets: an int32 [qlen, klen] table.
GeneratedAnno t5_relative_bucket(const OpCall& c) {
  int64_t q = c.int_attr("qlen"), k = c.int_attr("klen"), buckets = c.int_attr("buckets"), dist = c.int_attr("max_distance");
  bool bidirectional = c.bool_attr("bidirectional", true);
  if (q <= 0 || k <= 0) throw OpArgError{"t5_relative_bucket: qlen and klen must be positive"};
  int64_t exact = (bidirectional ? buckets / 2 : buckets) / 2;
  if (exact < 1 || (bidirectional && buckets % 2 != 0))
    throw OpArgError{"t5_relative_bucket: buckets must be at least " + std::string(bidirectional ? "4 and even" : "2") + " (got " + std::to_string(buckets) + ")"};
  if (dist <= exact) throw OpArgError{"t5_relative_bucket: max_distance must exceed the " + std::to_string(exact) + " exact buckets"};
  return {"-> q^ k^", {{"q", q}, {"k", k}}};
}

// ---- scans, selection, indexed access, casts (issue 13) ---------------------------

// x's dims with `dim` frozen (a scan or a selection moves data along it);
// size-1 dims are the literal 1.
std::vector<std::string> dims_frozen_at(const Shape& x, int64_t dim, const std::string& frozen) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < x.size(); ++i) {
    if (static_cast<int64_t>(i) == dim) ids.push_back(x[i] == 1 ? "1" : frozen + "^");
    else ids.push_back(x[i] == 1 ? "1" : id_name(static_cast<int>(i)));
  }
  return ids;
}

// cumsum(x, dim): every output along dim depends on all before it, so dim is '^'.
GeneratedAnno cumsum(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  if (x.empty()) throw OpArgError{"cumsum needs a tensor of rank >= 1"};
  int64_t dim = norm_axis(c.int_attr("dim"), x.size(), "dim");
  std::string ids = join(dims_frozen_at(x, dim, id_name(static_cast<int>(dim))));
  return {ids + " -> " + ids, {}};
}

// topk(x, k, dim): the k largest along dim (values, i32 indices). dim is
// '^' in and out: a part holding a slice of it would pick its own top k.
GeneratedAnno topk(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  if (x.empty()) throw OpArgError{"topk needs a tensor of rank >= 1"};
  int64_t dim = norm_axis(c.int_attr("dim"), x.size(), "dim");
  int64_t k = c.int_attr("k");
  if (k < 1 || k > x[dim])
    throw OpArgError{"topk: k = " + std::to_string(k) + " is not in [1, " + std::to_string(x[dim]) + "] (the size of dim " +
                     std::to_string(dim) + ")"};
  GeneratedAnno g;
  std::string in = join(dims_frozen_at(x, dim, "xn"));
  Shape out_shape = x;
  out_shape[dim] = k;
  std::string out = join(dims_frozen_at(out_shape, dim, "tk"));
  if (k > 1) g.sizes["tk"] = k;
  g.text = in + " -> " + out + ", " + out;
  return g;
}

// Shared by gather and scatter_add: `index` has x's rank and x's sizes but
// along dim (nns asks equal sizes where PyTorch allows smaller ones). Dims
// other than dim are spatial in both (a slice gathers within its slice);
// x's dim is '^' (any position may be read); index's dim is `index_mark`.
void indexed_annos(const Shape& x, const Shape& index, int64_t dim, const char* what, const std::string& index_mark,
                   std::vector<std::string>& xs, std::vector<std::string>& ixs) {
  if (index.size() != x.size())
    throw OpArgError{std::string(what) + ": index has rank " + std::to_string(index.size()) + " but x has rank " + std::to_string(x.size())};
  for (size_t i = 0; i < x.size(); ++i)
    if (static_cast<int64_t>(i) != dim && index[i] != x[i])
      throw OpArgError{std::string(what) + ": index has shape " + shape_to_string(index) + " and x " + shape_to_string(x) +
                       "; they must agree in every dim but dim " + std::to_string(dim)};
  xs = dims_frozen_at(x, dim, "xn");
  ixs = xs;
  ixs[dim] = index[dim] == 1 ? "1" : "ix" + index_mark;
}

// gather(x, dim, index) -> [index's shape]: out[.., i, ..] = x[.., index[.., i, ..], ..].
// index's dim may be split: each part reads its indices from the whole x.
GeneratedAnno gather(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  const Shape& index = tensor_shape(c, 1);
  if (x.empty()) throw OpArgError{"gather needs a tensor of rank >= 1"};
  int64_t dim = norm_axis(c.int_attr("dim"), x.size(), "dim");
  std::vector<std::string> xs, ixs;
  indexed_annos(x, index, dim, "gather", "", xs, ixs);
  return {join(xs) + ", " + join(ixs) + " -> " + join(ixs), {}};
}

// scatter_add(x, dim, index, src) -> [x's shape]: x with src[.., i, ..]
// added at x[.., index[.., i, ..], ..]. index's dim is '^' too: a split of
// it would add x once per part.
GeneratedAnno scatter_add(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  const Shape& index = tensor_shape(c, 1);
  const Shape& src = tensor_shape(c, 2);
  if (x.empty()) throw OpArgError{"scatter_add needs a tensor of rank >= 1"};
  int64_t dim = norm_axis(c.int_attr("dim"), x.size(), "dim");
  if (src != index)
    throw OpArgError{"scatter_add: src has shape " + shape_to_string(src) + " but index has " + shape_to_string(index) + "; they must be equal"};
  std::vector<std::string> xs, ixs;
  indexed_annos(x, index, dim, "scatter_add", "^", xs, ixs);
  return {join(xs) + ", " + join(ixs) + ", " + join(ixs) + " -> " + join(xs), {}};
}

// to_f32 / to_i32: elementwise; the kernels convert between f32 and i32 only.
GeneratedAnno cast(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  if (c.dtypes.size() > 0 && c.dtypes[0] != DType::F32 && c.dtypes[0] != DType::I32)
    throw OpArgError{std::string("casts convert f32 and i32 tensors, not ") + dtype_name(c.dtypes[0])};
  std::vector<std::string> ids;
  for (size_t i = 0; i < x.size(); ++i) ids.push_back(x[i] == 1 ? "1" : id_name(static_cast<int>(i)));
  if (ids.empty()) ids.push_back("1");
  return {join(ids) + " -> " + join(ids), {}};
}

// ---- multiply-add counts ---------------------------------------------------------

// Matmul-like ops: every identifier is a loop of the contraction.
int64_t product_of_ids(const BoundAnno& b, const OpCall&) {
  std::set<std::string> ids;
  for (const auto& side : {&b.anno.inputs, &b.anno.outputs})
    for (const OperandAnno& op : *side)
      for (const DimAnno& d : op.dims)
        for (const DimId& id : d.ids)
          if (!id.numeric) ids.insert(id.name);
  int64_t p = 1;
  for (const std::string& id : ids) p *= b.sizes.at(id);
  return p;
}

int64_t conv_macs(const BoundAnno& b, const OpCall& c) {
  const Shape& w = tensor_shape(c, 1);
  const Shape& out = b.output_shapes.at(0);
  return numel(out) * w[1] * w[2] * w[3];
}

// ---- slice facts (per-rank lowering) ---------------------------------------------

// Every input of the sub-op complete: the slice is the whole op.
bool slice_is_whole(const Graph& g, const OpNode& whole, const SubOp& s) {
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (s.inputs[i].length != g.tensor(whole.inputs[i]).shape) return false;
  return true;
}

// The dropout mask is a function of the element's index in the full tensor;
// a slice along dim 0 is contiguous, so one offset places it.
void dropout_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op) {
  auto p = op.attrs.find("p");
  bool active = p != op.attrs.end() && std::holds_alternative<double>(p->second) && std::get<double>(p->second) > 0;
  if (!active || slice_is_whole(g, whole, s)) return;
  bool only_dim0 = !whole.composite;
  for (size_t d = 1; only_dim0 && d < s.inputs[0].length.size(); ++d)
    only_dim0 = s.inputs[0].length[d] == g.tensor(whole.inputs[0]).shape[d];
  if (!only_dim0) throw std::runtime_error(whole.name + ": dropout split other than along its first dim is not supported yet");
  op.attrs["element_offset"] = s.inputs[0].start[0] * (numel(s.inputs[0].length) / std::max<int64_t>(1, s.inputs[0].length[0]));
}

// A vocab-split gather holds rows [offset, offset + rows) of the table; ids
// outside give zero rows (summed across the shards).
void gather_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op, size_t table) {
  if (whole.composite) return;
  op.attrs["vocab_offset"] = s.inputs[table].start[0];
  op.attrs["vocab_size"] = g.tensor(whole.inputs[table]).shape[0];
}
void embedding_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op) { gather_slice(g, whole, s, op, 1); }
void index_select_slice(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& op) { gather_slice(g, whole, s, op, 0); }

// Losses averaged over every element of input 0.
float elements_share(const Graph& g, const OpNode& whole, const SubOp& s) {
  const Shape& full = g.tensor(whole.inputs[0]).shape;
  return static_cast<float>(static_cast<double>(numel(s.inputs[0].length)) / static_cast<double>(numel(full)));
}

// mean over attr `dim` (default -1).
float reduced_dim_share(const Graph& g, const OpNode& whole, const SubOp& s) {
  const Shape& full = g.tensor(whole.inputs[0]).shape;
  auto it = whole.attrs.find("dim");
  int64_t d = it != whole.attrs.end() ? std::get<int64_t>(it->second) : -1;
  if (d < 0) d += static_cast<int64_t>(full.size());
  return static_cast<float>(static_cast<double>(s.inputs[0].length[d]) / static_cast<double>(full[d]));
}

OpRow* find_row(std::vector<OpRow>& rows, const char* name) {
  for (OpRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  auto add = [&](const char* name, GeneratedAnno (*gen)(const OpCall&) = nullptr,
                 int64_t (*macs)(const BoundAnno&, const OpCall&) = nullptr) {
    OpRow r;
    r.name = name;
    r.annotate = gen;
    r.macs = macs;
    rows.push_back(r);
    return &rows.back();
  };
  // Linear in the first input, so a value split (partial sums of it) is
  // legal; not linear_bias, whose every part would add the bias once
  // (`nns verify-op` finds that).
  for (const char* n : {"matmul", "bmm", "linear"}) add(n, nullptr, product_of_ids)->value_split = true;
  add("linear_bias", nullptr, product_of_ids);
  for (const char* n : {"add", "sub", "mul", "div", "maximum", "minimum"}) add(n, broadcast_binary);
  for (const char* n : {"add_scalar", "mul_scalar", "gelu", "relu", "sigmoid", "tanh", "dropout",
                        "softmax", "log_softmax", "layer_norm", "embedding", "cross_entropy", "causal_mask",
                        "silu", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "sin", "cos", "pow_scalar"})
    add(n);
  add("detach")->no_grad = true;
  // Comparisons: a float 0/1 mask, constant almost everywhere.
  for (const char* n : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    OpRow* r = add(n, broadcast_binary);
    r->no_grad = true;
    r->out_dtype = DType::F32;
  }
  add("where", broadcast_ternary)->no_grad_inputs = {0};
  add("mse", mse);
  add("sum", reduce_dim)->value_split = true;
  add("mean", reduce_dim)->value_split = true;
  add("amax", reduce_dim_frozen);
  add("amin", reduce_dim_frozen);
  OpRow* argmax = add("argmax", reduce_dim_frozen);
  argmax->out_dtype = DType::I32;
  argmax->no_grad = true;
  add("full", full)->out_dtype = DType::F32;
  add("arange", arange)->out_dtype = DType::F32;
  for (const char* n : {"zeros_like", "ones_like"}) {
    OpRow* r = add(n);
    r->no_grad = true;
    r->out_dtype = DType::F32;
  }
  add("reshape", reshape);
  add("view", reshape);
  add("permute", permute);
  add("transpose", transpose);
  add("roll", roll);
  add("concat", concat);
  add("split", split);
  add("chunk", chunk);
  add("pad", pad);
  add("conv2d", conv2d, conv_macs);
  add("conv2d_bias", conv2d_bias, conv_macs);
  add("max_pool2d", pool2d, pool_macs);
  add("avg_pool2d", pool2d, pool_macs);
  add("index_select", index_select);
  add("swin_relative_index", swin_relative_index)->out_dtype = DType::I32;
  add("swin_shift_mask", swin_shift_mask)->out_dtype = DType::F32;
  add("t5_relative_bucket", t5_relative_bucket)->out_dtype = DType::I32;
  // ---- scans, selection, indexed access, casts (issue 13) ----
  add("cumsum", cumsum);
  OpRow* tk = add("topk", topk);
  tk->out_dtypes = {DType::F32, DType::I32};
  add("gather", gather);
  add("scatter_add", scatter_add);
  // to_f32 passes the gradient of an f32 operand through; to_i32 none.
  OpRow* to_f32 = add("to_f32", cast);
  to_f32->out_dtype = DType::F32;
  to_f32->float_operands = false;
  OpRow* to_i32 = add("to_i32", cast);
  to_i32->out_dtype = DType::I32;
  to_i32->float_operands = false;
  to_i32->no_grad = true;
  // Ops that move 4-byte elements whatever they hold: integer tensors too.
  for (const char* n : {"reshape", "view", "permute", "transpose", "roll", "concat", "split", "chunk", "pad", "detach",
                        "zeros_like", "ones_like", "index_select"})
    find_row(rows, n)->float_operands = false;
  find_row(rows, "dropout")->slice_attrs = dropout_slice;
  find_row(rows, "embedding")->slice_attrs = embedding_slice;
  find_row(rows, "index_select")->slice_attrs = index_select_slice;
  find_row(rows, "cross_entropy")->slice_share = elements_share;
  find_row(rows, "mse")->slice_share = elements_share;
  find_row(rows, "mean")->slice_share = reduced_dim_share;
  return rows;
}

const std::vector<OpRow>& rows() {
  static const std::vector<OpRow> table = make_rows();
  return table;
}

}  // namespace

const OpRow* find_op_row(const std::string& name) {
  for (const OpRow& r : rows())
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::string> op_row_names() {
  std::vector<std::string> names;
  for (const OpRow& r : rows()) names.push_back(r.name);
  return names;
}

bool passes_gradient(const OpNode& node, size_t input) {
  const OpRow* row = node.composite ? nullptr : find_op_row(node.kind);
  if (!row) return true;
  return !row->no_grad && std::find(row->no_grad_inputs.begin(), row->no_grad_inputs.end(), input) == row->no_grad_inputs.end();
}

void apply_slice_position(const Graph& g, const OpNode& whole, const SubOp& s, OpNode& local_op) {
  const OpRow* row = find_op_row(local_op.kind);
  if (row && row->slice_attrs) row->slice_attrs(g, whole, s, local_op);
}

float slice_loss_share(const Graph& g, const OpNode& whole, const SubOp& s) {
  if (whole.composite) return 1.f;
  const OpRow* row = find_op_row(whole.kind);
  if (!row || !row->slice_share || slice_is_whole(g, whole, s)) return 1.f;
  return row->slice_share(g, whole, s);
}

}  // namespace nns::sema
