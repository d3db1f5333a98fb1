// Annotation generators of elementwise, reduction, shape and layout ops (see
// op_generators.h for the conventions).
#include <algorithm>
#include <set>
#include <stdexcept>

#include "semantics/op_generators.h"
#include "semantics/plan.h"

namespace nns::sema::op_generators {

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

// Elementwise ops with numpy broadcasting over k operands (add, maximum,
// where...): every operand aligned from the right; a size-1 dim facing a larger one is the
// literal 1 (frozen) on its side.
static GeneratedAnno broadcast(const OpCall& c, size_t k) {
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
        throw OpArgError{"cannot broadcast shapes " + shape_to_string(c.inputs[sized].shape) + " and " +
                         shape_to_string(x) + " (dim " + std::to_string(j) + ": " + std::to_string(size) + " vs " +
                         std::to_string(d[i]) + ")"};
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

static GeneratedAnno reduce_dim_marked(const OpCall& c, const char* mark) {
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
    if (i < in.size() && in[i] == 1) {
      ins.push_back("1");
      ++i;
      continue;
    }
    if (j < target.size() && target[j] == 1) {
      outs.push_back("1");
      ++j;
      continue;
    }
    size_t i0 = i, j0 = j;
    int64_t pi = in[i++], pj = target[j++];
    while (pi != pj) {
      if (pi < pj)
        pi *= in[i++];
      else
        pj *= target[j++];
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
      if (n_in == 1) {
        ins.push_back(bracket);
        for (auto& id : ids) outs.push_back(id);
      } else {
        for (auto& id : ids) ins.push_back(id);
        outs.push_back(bracket);
      }
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

static GeneratedAnno permute_dims(const Shape& x, const std::vector<int64_t>& perm) {
  if (perm.size() != x.size())
    throw OpArgError{"permute: " + std::to_string(perm.size()) + " dims given for a rank-" + std::to_string(x.size()) +
                     " tensor"};
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
    if (x.size() != x0.size())
      throw OpArgError{"concat: tensor " + std::to_string(t) + " has rank " + std::to_string(x.size()) + ", expected " +
                       std::to_string(x0.size())};
    // Checked here so the message speaks of dims, not generated identifiers.
    for (size_t i = 0; i < x.size(); ++i)
      if (static_cast<int64_t>(i) != dim && x[i] != x0[i])
        throw OpArgError{"concat: tensor " + std::to_string(t) + " has shape " + shape_to_string(x) +
                         " but tensor 0 has " + shape_to_string(x0) + "; only dim " + std::to_string(dim) +
                         " may differ"};
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
  for (size_t i = 0; i < x0.size(); ++i)
    out.push_back(static_cast<int64_t>(i) == dim ? "cat^" : id_name(static_cast<int>(i)));
  g.sizes["cat"] = total;
  std::string s;
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i];
  g.text = s + " -> " + join(out);
  return g;
}

static GeneratedAnno split_sizes(const Shape& x, int64_t dim, const std::vector<int64_t>& sizes) {
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s <= 0) throw OpArgError{"split: piece size " + std::to_string(s) + " is not positive"};
    sum += s;
  }
  if (sum != x[dim])
    throw OpArgError{"split: sizes add up to " + std::to_string(sum) + " but dim " + std::to_string(dim) + " is " +
                     std::to_string(x[dim])};
  GeneratedAnno g;
  std::vector<std::string> in;
  for (size_t i = 0; i < x.size(); ++i)
    in.push_back(static_cast<int64_t>(i) == dim ? "s^" : id_name(static_cast<int>(i)));
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
    throw OpArgError{"chunk: " + std::to_string(x[dim]) + " does not divide into " + std::to_string(n) +
                     " equal chunks"};
  return split_sizes(x, dim, std::vector<int64_t>(n, x[dim] / n));
}

// pad: pads = [before0, after0, before1, after1, ...] in dim order; padded dims are frozen.
GeneratedAnno pad(const OpCall& c) {
  const Shape& x = tensor_shape(c, 0);
  std::vector<int64_t> pads = c.ints_attr("pads");
  if (pads.size() != 2 * x.size())
    throw OpArgError{"pad: expected " + std::to_string(2 * x.size()) + " values (before/after per dim), got " +
                     std::to_string(pads.size())};
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

}  // namespace nns::sema::op_generators
