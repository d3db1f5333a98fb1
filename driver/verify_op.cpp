// nns verify-op FILE OP: checks an op's annotation numerically. For every
// partition in the op's transform space (every splittable identifier, and
// the value split where the op allows one, into 2 and 4 parts) it runs each
// part on its slices of random inputs, reassembles the outputs and input
// gradients the way the annotation says (a split dim concatenates, a
// reduction identifier sums partial results, a value part is a share of
// the input) and compares them with the whole op run once. A wrong
// annotation (an identifier marked splittable whose split changes the
// result) is caught here, before a plan trains on it, with the identifier
// named.
//
// The parts are elaborated exactly as lowering elaborates a plan's sub-ops
// (Interpreter::instantiate_op, the registry's slice position and loss
// share), and run with the CPU backend's kernels.
#include "driver/commands.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/lowering/geometry.h"
#include "backend/runtime/backend.h"
#include "backend/runtime/plan_executor.h"
#include "driver/args.h"
#include "driver/pipeline.h"
#include "semantics/autograd.h"
#include "semantics/builtin_args.h"
#include "semantics/op_registry.h"
#include "semantics/output_grads.h"
#include "semantics/plan.h"

namespace nns::driver {
namespace {

using backend::Piece;
using sema::Shape;

// One elaborated op (whole or a part) with host buffers for its local graph.
struct LocalOp {
  sema::Graph graph;
  sema::OpInstance inst;
  std::vector<int> dy;  // per output: the gradient seed (-1: not differentiable)
  sema::Backward bwd;
  std::map<int, std::vector<uint8_t>> bufs;

  backend::TensorView view(int t) {
    const sema::TensorInfo& info = graph.tensor(t);
    std::vector<uint8_t>& b = bufs[t];
    size_t bytes = static_cast<size_t>(sema::numel(info.shape) * sema::dtype_bytes(info.dtype));
    if (b.size() != bytes) b.assign(bytes, 0);
    return backend::TensorView{b.data(), info.dtype, info.shape};
  }
  void run(backend::Backend& be, const std::vector<int>& nodes) {
    for (int n : nodes) {
      const sema::OpNode& node = graph.node(n);
      std::vector<backend::TensorView> in, out;
      for (int t : node.inputs) in.push_back(view(t));
      for (int t : node.outputs) out.push_back(view(t));
      be.run_node(graph, node, in, out);
    }
  }
  std::vector<float> floats(int t) {
    backend::TensorView v = view(t);
    std::vector<float> out(static_cast<size_t>(v.numel()));
    std::memcpy(out.data(), v.data, out.size() * 4);
    return out;
  }
};

// Elaborates `node` on the given operand shapes and builds its backward
// (gradients of every float input, seeded by one tensor per float output).
// A part (`slice` given) gets its slice position before the backward is
// built, as lowering does: the backward nodes copy the forward's attributes.
void elaborate(sema::Interpreter& interp, const sema::Graph& g, int node, const std::vector<Shape>& ins, const std::vector<Shape>& outs,
               const std::map<std::string, int64_t>& divisors, const sema::SubOp* slice, LocalOp& op) {
  op.inst = interp.instantiate_op(node, ins, outs, divisors, op.graph);
  if (slice)
    for (int ln : op.inst.nodes) sema::apply_slice_position(g, g.node(node), *slice, op.graph.node(ln));
  std::map<int, int> seeds = sema::add_output_gradients(op.graph, op.inst.outputs, op.dy);
  std::vector<int> wrt;
  for (int in : op.inst.inputs)
    if (sema::dtype_is_float(op.graph.tensor(in).dtype)) wrt.push_back(in);
  op.bwd = sema::differentiate(op.graph, op.inst.nodes, seeds, wrt);
}

// Random operand values: floats uniform in [-1, 1); integer operands
// (indices) below the smallest dim of the op's float operands, so that
// they index every table and class count the op has.
std::vector<std::vector<uint8_t>> random_operands(const sema::Graph& g, const std::vector<int>& tensors, uint32_t seed) {
  int64_t index_bound = INT64_MAX;
  for (int t : tensors)
    if (sema::dtype_is_float(g.tensor(t).dtype))
      for (int64_t d : g.tensor(t).shape) index_bound = std::min(index_bound, d);
  if (index_bound == INT64_MAX || index_bound < 1) index_bound = 1;
  std::mt19937 gen(seed);
  std::vector<std::vector<uint8_t>> out;
  for (int t : tensors) {
    const sema::TensorInfo& info = g.tensor(t);
    int64_t n = sema::numel(info.shape);
    std::vector<uint8_t> b(static_cast<size_t>(n * sema::dtype_bytes(info.dtype)));
    if (info.dtype == sema::DType::F32) {
      std::uniform_real_distribution<float> d(-1.f, 1.f);
      float* p = reinterpret_cast<float*>(b.data());
      for (int64_t i = 0; i < n; ++i) p[i] = d(gen);
    } else if (info.dtype == sema::DType::I32) {
      std::uniform_int_distribution<int64_t> d(0, index_bound - 1);
      int32_t* p = reinterpret_cast<int32_t*>(b.data());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(d(gen));
    } else if (info.dtype == sema::DType::I64) {
      std::uniform_int_distribution<int64_t> d(0, index_bound - 1);
      int64_t* p = reinterpret_cast<int64_t*>(b.data());
      for (int64_t i = 0; i < n; ++i) p[i] = d(gen);
    }  // other dtypes stay zero
    out.push_back(std::move(b));
  }
  return out;
}

// The box of a full tensor (raw bytes of dtype `dt`) a piece covers, scaled
// (floats only).
std::vector<uint8_t> cut(const std::vector<uint8_t>& full, const Shape& shape, const Piece& box, sema::DType dt, float scale) {
  Piece whole = backend::full_piece(shape);
  std::vector<uint8_t> out(static_cast<size_t>(box.numel() * sema::dtype_bytes(dt)));
  if (sema::dtype_bytes(dt) == 4) {
    backend::copy_region(reinterpret_cast<const float*>(full.data()), whole, reinterpret_cast<float*>(out.data()), box, box.start, box.length, false,
                         dt == sema::DType::F32 ? scale : 1.f);
    return out;
  }
  // 8-byte integers: row by row over the box, without arithmetic.
  const size_t e = static_cast<size_t>(sema::dtype_bytes(dt));
  std::vector<int64_t> idx(box.start.size(), 0);
  const int64_t n = box.numel();
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = k, src = 0, stride = 1;
    for (size_t d = box.start.size(); d-- > 0;) {
      idx[d] = rem % box.length[d];
      rem /= box.length[d];
    }
    for (size_t d = box.start.size(); d-- > 0;) {
      src += (box.start[d] + idx[d]) * stride;
      stride *= shape[d];
    }
    std::memcpy(out.data() + static_cast<size_t>(k) * e, full.data() + static_cast<size_t>(src) * e, e);
  }
  return out;
}

// Normwise relative error of `got` against `want` (infinities and NaNs
// must match). The random operands lie in [-1, 1), outside the domain of
// sqrt, rsqrt, log: a NaN where the whole op has one is agreement.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      if (std::isnan(want[i]) != std::isnan(got[i])) return INFINITY;
      continue;
    }
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) return INFINITY;
      continue;
    }
    double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  if (std::isnan(diff)) return INFINITY;
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

std::string shapes_text(const sema::Graph& g, const std::vector<int>& ts) {
  std::string s;
  for (int t : ts) s += (s.empty() ? "" : ", ") + sema::shape_to_string(g.tensor(t).shape);
  return s;
}

constexpr double kBound = 1e-5;  // fp32, as --verify

struct Outcome {
  double out_err = 0, grad_err = 0;
  std::string worst;     // what differs most
  std::set<int> skipped;  // inputs whose gradient is rounding noise
};

// One partition of `node` into `num` parts by `choice`, against `whole`.
Outcome run_partition(sema::Interpreter& interp, backend::Backend& be, const sema::Graph& g, int node, const sema::TransformChoice& choice, int num,
                      const std::vector<std::vector<uint8_t>>& inputs, const std::vector<std::vector<float>>& dys, LocalOp& whole) {
  const sema::OpNode& n = g.node(node);
  sema::SubOp root = sema::whole_op(g, node);
  std::vector<sema::SubOp> parts = sema::split_subop(root, 0, choice, num);
  std::map<std::string, int64_t> div;
  if (choice.kind == sema::TransformChoice::Dim) div[choice.id] = num;

  std::vector<std::vector<float>> outs(n.outputs.size()), grads(n.inputs.size());
  for (size_t o = 0; o < n.outputs.size(); ++o) outs[o].assign(static_cast<size_t>(sema::numel(g.tensor(n.outputs[o]).shape)), 0.f);
  for (size_t i = 0; i < n.inputs.size(); ++i) grads[i].assign(static_cast<size_t>(sema::numel(g.tensor(n.inputs[i]).shape)), 0.f);
  std::vector<bool> replicated_out(n.outputs.size(), false);
  for (size_t o = 0; o < n.outputs.size() && o < choice.outputs.size(); ++o)
    replicated_out[o] = choice.outputs[o].kind == sema::PartitionEffect::Replicated;

  for (const sema::SubOp& s : parts) {
    LocalOp part;
    std::vector<Shape> ins, outsh;
    for (const sema::OperandSlice& sl : s.inputs) ins.push_back(sl.length);
    for (const sema::OperandSlice& sl : s.outputs) outsh.push_back(sl.length);
    elaborate(interp, g, node, ins, outsh, div, &s, part);
    const float share = sema::slice_loss_share(g, n, s);
    // Inputs: the part's box, a value part as its share of the whole.
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Piece box = backend::piece_of_slice(s.inputs[i]);
      const sema::TensorInfo& t = g.tensor(n.inputs[i]);
      std::vector<uint8_t> v = cut(inputs[i], t.shape, box, t.dtype, 1.f / static_cast<float>(s.inputs[i].value_parts));
      backend::TensorView dst = part.view(part.inst.inputs[i]);
      std::memcpy(dst.data, v.data(), v.size());
    }
    part.run(be, part.inst.nodes);
    // Outputs: a split lands in its box, partial sums add up (each scaled
    // by the part's loss share); a replicated output is taken once.
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (!sema::dtype_is_float(g.tensor(n.outputs[o]).dtype)) continue;
      if (replicated_out[o] && s.split_index > 0) continue;
      Piece box = backend::piece_of_slice(s.outputs[o]);
      std::vector<float> v = part.floats(part.inst.outputs[o]);
      backend::copy_region(v.data(), box, outs[o].data(), backend::full_piece(g.tensor(n.outputs[o]).shape), box.start, box.length, true, share);
    }
    // Backward: each part's output gradient is the whole one's box (times
    // the share); its input gradients add up in their boxes, a value part's
    // scaled by its share of the input.
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (part.dy[o] < 0) continue;
      Piece box = backend::piece_of_slice(s.outputs[o]);
      box.value_index = 0, box.value_parts = 1;
      const Shape& shape = g.tensor(n.outputs[o]).shape;
      std::vector<uint8_t> raw(dys[o].size() * 4);
      std::memcpy(raw.data(), dys[o].data(), raw.size());
      float scale = replicated_out[o] ? (s.split_index == 0 ? 1.f : 0.f) : share;
      std::vector<uint8_t> v = cut(raw, shape, box, sema::DType::F32, scale);
      backend::TensorView dst = part.view(part.dy[o]);
      std::memcpy(dst.data, v.data(), v.size());
    }
    part.run(be, part.bwd.nodes);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto it = part.bwd.grads.find(part.inst.inputs[i]);
      if (it == part.bwd.grads.end() || it->second < 0) continue;
      Piece box = backend::piece_of_slice(s.inputs[i]);
      std::vector<float> v = part.floats(it->second);
      backend::copy_region(v.data(), box, grads[i].data(), backend::full_piece(g.tensor(n.inputs[i]).shape), box.start, box.length, true,
                           1.f / static_cast<float>(s.inputs[i].value_parts));
    }
  }

  Outcome r;
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    if (!sema::dtype_is_float(g.tensor(n.outputs[o]).dtype)) continue;
    double e = relative_error(outs[o], whole.floats(whole.inst.outputs[o]));
    if (e > r.out_err) {
      r.out_err = e;
      if (e > kBound) r.worst = "output " + std::to_string(o);
    }
  }
  // Gradients the outputs do not depend on (norm at most 1e-6 of the
  // largest: rounding noise, e.g. a key bias under softmax) are not
  // compared, as --verify does not.
  double largest = 0;
  std::vector<double> norms(n.inputs.size(), 0);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    auto it = whole.bwd.grads.find(whole.inst.inputs[i]);
    if (it == whole.bwd.grads.end() || it->second < 0) continue;
    for (float x : whole.floats(it->second)) norms[i] += static_cast<double>(x) * x;
    norms[i] = std::sqrt(norms[i]);
    largest = std::max(largest, norms[i]);
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    auto it = whole.bwd.grads.find(whole.inst.inputs[i]);
    if (it == whole.bwd.grads.end() || it->second < 0) continue;
    if (norms[i] <= 1e-6 * largest) {
      r.skipped.insert(static_cast<int>(i));
      continue;
    }
    double e = relative_error(grads[i], whole.floats(it->second));
    if (e > r.grad_err) {
      r.grad_err = e;
      if (e > kBound && r.worst.empty()) r.worst = "the gradient of input " + std::to_string(i);
    }
  }
  return r;
}

}  // namespace

// nns verify-op FILE OP [--config C]
int cmd_verify_op(const Args& a) {
  if (a.positional.size() != 2) return usage_error("usage: nns verify-op FILE OP (OP: an op kind such as 'linear', or a qualified-name glob)");
  PipelineOptions o;
  o.path = a.positional[0];
  o.config = a.config;
  o.last = Stage::Graph;  // the model evaluated; nothing printed
  std::string usage;
  if (!parse_eval_budget(a, o.eval_budget, usage)) return usage_error(usage);
  Pipeline p;
  if (int rc = run_pipeline(o, p); rc != kExitOk) return rc;
  const std::string& pattern = a.positional[1];
  const sema::Graph& g = p.graph();
  auto be = backend::make_cpu_backend(a.reference);

  // One node per signature (kind and operand shapes): calls alike check alike.
  std::vector<int> nodes;
  std::set<std::string> seen;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const sema::OpNode& n = g.node(static_cast<int>(i));
    if (n.parent >= 0 || n.phase != sema::Phase::Forward) continue;
    if (n.kind != pattern && !sema::builtin_args::glob(pattern.c_str(), n.name.c_str())) continue;
    std::string sig = n.kind + " " + shapes_text(g, n.inputs);
    if (seen.insert(sig).second) nodes.push_back(static_cast<int>(i));
  }
  if (nodes.empty()) {
    std::cerr << "nns: error: no op of " << o.path << " is of kind or named '" << pattern << "' (`nns check " << o.path
              << " --emit=graph` lists them)\n";
    return kExitUsage;
  }

  int partitions = 0, wrong = 0;
  uint32_t seed = 1234;
  for (int node : nodes) {
    const sema::OpNode& n = g.node(node);
    LocalOp whole;
    std::vector<Shape> ins, outs;
    for (int t : n.inputs) ins.push_back(g.tensor(t).shape);
    for (int t : n.outputs) outs.push_back(g.tensor(t).shape);
    std::vector<std::vector<uint8_t>> inputs = random_operands(g, n.inputs, seed++);
    std::vector<std::vector<float>> dys;
    std::mt19937 gen(seed++);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (int t : n.outputs) {
      std::vector<float> v(static_cast<size_t>(sema::numel(g.tensor(t).shape)));
      for (float& x : v) x = d(gen);
      dys.push_back(std::move(v));
    }
    try {
      elaborate(*p.interp, g, node, ins, outs, {}, nullptr, whole);
      for (size_t i = 0; i < n.inputs.size(); ++i) std::memcpy(whole.view(whole.inst.inputs[i]).data, inputs[i].data(), inputs[i].size());
      whole.run(*be, whole.inst.nodes);
      for (size_t o2 = 0; o2 < n.outputs.size(); ++o2)
        if (whole.dy[o2] >= 0) std::memcpy(whole.view(whole.dy[o2]).data, dys[o2].data(), dys[o2].size() * 4);
      whole.run(*be, whole.bwd.nodes);
    } catch (const std::exception& e) {
      std::cerr << "nns: error: " << n.name << ": cannot run the whole op: " << e.what() << "\n";
      return kExitRuntime;
    }
    std::printf("%s (%s): %s -> %s, annotation %s\n", n.name.c_str(), n.kind.c_str(), shapes_text(g, n.inputs).c_str(), shapes_text(g, n.outputs).c_str(),
                n.anno.anno.to_string().c_str());
    const sema::OpRow* row = n.composite ? nullptr : sema::find_op_row(n.kind);
    std::vector<sema::TransformChoice> space = sema::transform_space(n.anno, row && row->value_split);
    if (space.empty()) std::printf("  (no partition: every identifier is frozen)\n");
    for (const sema::TransformChoice& c : space)
      for (int num : {2, 4}) {
        if (c.kind == sema::TransformChoice::Dim && c.size % num != 0) continue;
        std::string what = c.kind == sema::TransformChoice::Value ? "value" : "'" + c.id + "' (size " + std::to_string(c.size) + ")";
        ++partitions;
        Outcome r;
        try {
          r = run_partition(*p.interp, *be, g, node, c, num, inputs, dys, whole);
        } catch (const std::exception& e) {
          ++wrong;
          std::printf("  %s in %d: CANNOT RUN: %s\n", what.c_str(), num, e.what());
          continue;
        }
        bool ok = r.out_err <= kBound && r.grad_err <= kBound;
        if (!ok) ++wrong;
        std::string noise;
        for (int i : r.skipped) noise += (noise.empty() ? "" : ", ") + std::to_string(i);
        if (!noise.empty()) noise = "; gradient of input " + noise + " not compared (rounding noise: the outputs do not depend on it)";
        std::printf("  %s in %d: %s (outputs %.1e, gradients %.1e)%s%s\n", what.c_str(), num, ok ? "ok" : "WRONG", r.out_err, r.grad_err,
                    ok ? "" : ("; " + r.worst + " differs from the whole op's: the annotation must not make " + what + " splittable this way").c_str(),
                    noise.c_str());
      }
  }
  std::printf("verify-op: %zu op(s), %d partition(s): %s\n", nodes.size(), partitions,
              wrong ? (std::to_string(wrong) + " differ from the whole op (relative error above 1e-05)").c_str() : "every one equals the whole op (relative error <= 1e-05)");
  return wrong ? kExitBadInput : kExitOk;
}

}  // namespace nns::driver
