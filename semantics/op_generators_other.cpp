// Annotation generators of convolution, pooling, indexing, loss, constant,
// scan and cast ops (see op_generators.h for the conventions).
#include <algorithm>
#include <set>
#include <stdexcept>

#include "semantics/op_generators.h"
#include "semantics/plan.h"

namespace nns::sema::op_generators {

static GeneratedAnno conv2d_impl(const OpCall& c, bool bias) {
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
  if (x.size() != 4)
    throw OpArgError{"pooling expects x [n, c, h, w], got a rank-" + std::to_string(x.size()) + " tensor"};
  int64_t k = c.int_attr("kernel"), stride = c.int_attr("stride"), padding = c.int_attr("padding");
  if (k <= 0 || stride <= 0 || padding < 0)
    throw OpArgError{"pooling: kernel and stride must be positive and padding non-negative"};
  // As PyTorch: larger padding would give windows of padding only.
  if (2 * padding > k)
    throw OpArgError{"pooling: padding " + std::to_string(padding) + " exceeds half the kernel " + std::to_string(k)};
  int64_t oh = (x[2] + 2 * padding - k) / stride + 1, ow = (x[3] + 2 * padding - k) / stride + 1;
  if (oh <= 0 || ow <= 0) throw OpArgError{"pooling: kernel larger than the padded input"};
  return {"n c h^ w^ -> n c oh^ ow^", {{"oh", oh}, {"ow", ow}}};
}

int64_t pool_macs(const BoundAnno& b, const OpCall& c) {
  return numel(b.output_shapes.at(0)) * c.int_attr("kernel") * c.int_attr("kernel");
}
// ---- end of pooling --------------------------------------------------------------

// index_select(table [t, ...], idx [...]) -> [idx..., ...]
GeneratedAnno index_select(const OpCall& c) {
  const Shape& table = tensor_shape(c, 0);
  const Shape& idx = tensor_shape(c, 1);
  if (table.empty()) throw OpArgError{"index_select: the table must have at least one dim"};
  std::vector<std::string> t{"t^"}, ix, out;
  for (size_t i = 0; i < idx.size(); ++i) {
    ix.push_back("i" + std::to_string(i));
    out.push_back(ix.back());
  }
  for (size_t i = 1; i < table.size(); ++i) {
    t.push_back("r" + std::to_string(i));
    out.push_back(t.back());
  }
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
    throw OpArgError{"shift mask: window " + std::to_string(win) + " must divide the resolution " + std::to_string(h) +
                     "x" + std::to_string(w)};
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
  int64_t q = c.int_attr("qlen"), k = c.int_attr("klen"), buckets = c.int_attr("buckets"),
          dist = c.int_attr("max_distance");
  bool bidirectional = c.bool_attr("bidirectional", true);
  if (q <= 0 || k <= 0) throw OpArgError{"t5_relative_bucket: qlen and klen must be positive"};
  int64_t exact = (bidirectional ? buckets / 2 : buckets) / 2;
  if (exact < 1 || (bidirectional && buckets % 2 != 0))
    throw OpArgError{"t5_relative_bucket: buckets must be at least " + std::string(bidirectional ? "4 and even" : "2") +
                     " (got " + std::to_string(buckets) + ")"};
  if (dist <= exact)
    throw OpArgError{"t5_relative_bucket: max_distance must exceed the " + std::to_string(exact) + " exact buckets"};
  return {"-> q^ k^", {{"q", q}, {"k", k}}};
}

// sdpa_bias(q, kt, v, bias): sdpa's annotation with the additive bias
// [..., s, t] broadcast (numpy, from the right) over q's leading dims. A
// leading dim the bias lacks or has as 1 is absent or the literal 1 on its
// side: splitting it replicates the bias (and leaves dbias partial sums over
// it); a dim the bias shares (heads) splits the bias with q, kt and v.
GeneratedAnno sdpa_bias(const OpCall& c) {
  const Shape& q = tensor_shape(c, 0);
  const Shape& bias = tensor_shape(c, 3);
  if (q.size() < 2) throw OpArgError{"sdpa_bias: q must have at least 2 dims, got " + shape_to_string(q)};
  if (bias.size() < 2 || bias.size() > q.size())
    throw OpArgError{"sdpa_bias: bias " + shape_to_string(bias) + " must be [..., s, t] with at most q's " +
                     std::to_string(q.size()) + " dims"};
  const size_t lead = q.size() - 2, bias_lead = bias.size() - 2, skip = lead - bias_lead;
  std::vector<std::string> l, lb;
  for (size_t i = 0; i < lead; ++i) {
    std::string id = q[i] == 1 ? "1" : id_name(static_cast<int>(i));
    l.push_back(id);
    if (i < skip) continue;
    const int64_t b = bias[i - skip];
    if (b != 1 && b != q[i])
      throw OpArgError{"sdpa_bias: bias " + shape_to_string(bias) + " does not broadcast against q " +
                       shape_to_string(q) + " (dim " + std::to_string(i - skip) + ": " + std::to_string(b) + " vs " +
                       std::to_string(q[i]) + ")"};
    lb.push_back(b == 1 ? "1" : id);
  }
  const std::string L = join(l), Lb = join(lb), sep = l.empty() ? "" : " ", sepb = lb.empty() ? "" : " ";
  auto id = [&](size_t k) { return id_name(static_cast<int>(lead + k)); };
  const std::string s = id(0) + "^", e = id(1) + "^", t = id(2) + "^", f = id(3);
  return {L + sep + s + " " + e + ", " + L + sep + e + " " + t + ", " + L + sep + t + " " + f + ", " + Lb + sepb + s +
              " " + t + " -> " + L + sep + s + " " + f,
          {}};
}

// ---- scans, selection, indexed access, casts (issue 13) ---------------------------

// x's dims with `dim` frozen (a scan or a selection moves data along it);
// size-1 dims are the literal 1.
static std::vector<std::string> dims_frozen_at(const Shape& x, int64_t dim, const std::string& frozen) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < x.size(); ++i) {
    if (static_cast<int64_t>(i) == dim)
      ids.push_back(x[i] == 1 ? "1" : frozen + "^");
    else
      ids.push_back(x[i] == 1 ? "1" : id_name(static_cast<int>(i)));
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
    throw OpArgError{"topk: k = " + std::to_string(k) + " is not in [1, " + std::to_string(x[dim]) +
                     "] (the size of dim " + std::to_string(dim) + ")"};
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
static void indexed_annos(const Shape& x, const Shape& index, int64_t dim, const char* what,
                          const std::string& index_mark, std::vector<std::string>& xs, std::vector<std::string>& ixs) {
  if (index.size() != x.size())
    throw OpArgError{std::string(what) + ": index has rank " + std::to_string(index.size()) + " but x has rank " +
                     std::to_string(x.size())};
  for (size_t i = 0; i < x.size(); ++i)
    if (static_cast<int64_t>(i) != dim && index[i] != x[i])
      throw OpArgError{std::string(what) + ": index has shape " + shape_to_string(index) + " and x " +
                       shape_to_string(x) + "; they must agree in every dim but dim " + std::to_string(dim)};
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
    throw OpArgError{"scatter_add: src has shape " + shape_to_string(src) + " but index has " + shape_to_string(index) +
                     "; they must be equal"};
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

}  // namespace nns::sema::op_generators
