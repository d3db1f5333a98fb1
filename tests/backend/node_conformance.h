// The conformance table through the Backend interface (ggml's
// test-backend-ops): each case is one graph node — a forward op or its
// "<op>_backward" with autograd's conventions (semantics/autograd.h) — on
// seeded random inputs, run by Backend::run_node on the reference backend
// (the oracle) and on the backend under test, outputs compared with
// expect_close. A new backend (CUDA) joins the table by adding itself to
// tested_backends(); nothing else changes.
#pragma once

#include <limits>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/runtime/backend.h"
#include "backend/runtime/cpu/half_bits.h"
#include "backend_test_util.h"
#include "semantics/graph.h"

namespace nns::backend::test {

// A host-side tensor: float values, or int32 values for ids and targets.
struct HostTensor {
  sema::DType dtype = sema::DType::F32;
  sema::Shape shape;
  Buf f;                    // F32
  std::vector<int32_t> i;   // I32
};

inline HostTensor f32(sema::Shape shape, Buf values) { return {sema::DType::F32, std::move(shape), std::move(values), {}}; }
inline HostTensor f32_zeros(sema::Shape shape) {
  int64_t n = sema::numel(shape);
  return f32(std::move(shape), zeros(n));
}
inline HostTensor i32(sema::Shape shape, std::vector<int32_t> values) { return {sema::DType::I32, std::move(shape), {}, std::move(values)}; }

// One node and the tensors it reads and writes. The contents of `outputs`
// are what the output buffers hold before the kernel runs (zeros unless a
// case wants to see that a kernel overwrites them).
struct NodeCase {
  std::string kind;
  std::map<std::string, sema::Attr> attrs;
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> outputs;
};

// Runs `c` on backend `b`: device buffers for every operand, inputs copied
// in, run_node on a one-node graph, outputs copied back. bf16_storage (a
// backend with Backend::bf16_storage()): every f32 operand is held in bf16,
// as the executor hands bf16 activations over: inputs rounded to bf16 on
// the host, outputs read back as bf16 and widened.
// null_inputs: the inputs given as views with a shape and no data (a
// backward's unread forward tensors, OpRow::backward_reads).
inline std::vector<HostTensor> run_case(Backend& b, const NodeCase& c, bool bf16_storage = false,
                                        const std::set<size_t>& null_inputs = {}) {
  sema::Graph g;
  sema::OpNode node;
  node.kind = c.kind;
  node.name = c.kind + "#0";
  node.attrs = c.attrs;
  if (c.kind.size() > 9 && c.kind.compare(c.kind.size() - 9, 9, "_backward") == 0) node.phase = sema::Phase::Backward;
  std::vector<TensorView> in, out;
  std::vector<size_t> bytes_in, bytes_out;
  // Released however run_case ends: cases that expect run_node to throw
  // (an index out of range) must not leak their buffers into the next case.
  struct Release {
    Backend& b;
    std::vector<TensorView>& views;
    std::vector<size_t>& bytes;
    ~Release() {
      for (size_t k = 0; k < views.size(); ++k)
        if (views[k].data) b.release(views[k].data, bytes[k]);
    }
  } release_in{b, in, bytes_in}, release_out{b, out, bytes_out};
  auto add = [&](const HostTensor& t, bool null, std::vector<int>& ids, std::vector<TensorView>& views,
                 std::vector<size_t>& sizes) {
    sema::TensorInfo info;
    info.shape = t.shape;
    info.dtype = t.dtype;
    info.name = "t" + std::to_string(g.tensors().size());
    ids.push_back(g.add_tensor(info));
    const bool half = bf16_storage && t.dtype == sema::DType::F32;
    size_t bytes = static_cast<size_t>(sema::numel(t.shape) * (half ? 2 : sema::dtype_bytes(t.dtype)));
    REQUIRE((t.dtype == sema::DType::I32 ? t.i.size() : t.f.size()) == static_cast<size_t>(sema::numel(t.shape)));
    TensorView v{null ? nullptr : b.allocate(bytes), half ? sema::DType::BF16 : t.dtype, t.shape};
    views.push_back(v);  // owned by the Release guard from here
    sizes.push_back(bytes);
    const void* host =
        t.dtype == sema::DType::I32 ? static_cast<const void*>(t.i.data()) : static_cast<const void*>(t.f.data());
    std::vector<uint16_t> bits;
    if (half) {
      for (float x : t.f) bits.push_back(cpu::bf16_bits(x));
      host = bits.data();
    }
    if (!null && bytes > 0) b.copy_from_host(v.data, host, bytes);
  };
  for (size_t k = 0; k < c.inputs.size(); ++k) add(c.inputs[k], null_inputs.count(k) > 0, node.inputs, in, bytes_in);
  for (const HostTensor& t : c.outputs) add(t, false, node.outputs, out, bytes_out);
  int id = g.add_node(node);
  b.run_node(g, g.node(id), in, out);
  std::vector<HostTensor> result = c.outputs;
  for (size_t k = 0; k < out.size(); ++k) {
    void* host = result[k].dtype == sema::DType::I32 ? static_cast<void*>(result[k].i.data()) : static_cast<void*>(result[k].f.data());
    if (out[k].dtype == sema::DType::BF16) {
      std::vector<uint16_t> bits(result[k].f.size());
      if (bytes_out[k] > 0) b.copy_to_host(bits.data(), out[k].data, bytes_out[k]);
      for (size_t i = 0; i < bits.size(); ++i) result[k].f[i] = cpu::bf16_to_float(bits[i]);
      continue;
    }
    if (bytes_out[k] > 0) b.copy_to_host(host, out[k].data, bytes_out[k]);
  }
  return result;
}

// Values as floats for expect_close (int32 outputs are small indices: exact).
inline Buf as_floats(const HostTensor& t) {
  if (t.dtype != sema::DType::I32) return t.f;
  return Buf(t.i.begin(), t.i.end());
}

// The oracle: the plain reference kernels.
inline Backend& reference_backend() {
  static std::unique_ptr<Backend> b = make_cpu_backend(true);
  return *b;
}

// The backends this test binary checks against the reference, defined by
// the binary (tests/backend/tested_cpu.cpp: the CPU fast kernels;
// tests/cuda: the CUDA backend, or its host emulation).
std::vector<Backend*> tested_backends();
// Whether `b` lacks the kernel of `kind` by a documented, exact list (the
// CUDA backend while it is being written; never the CPU backend). A case
// for such a kind is not run on `b`; any other missing kernel fails.
bool kernel_pending(const Backend& b, const std::string& kind);
// A tested backend that must give bitwise the same outputs as `b` (the
// emulation run with its index spaces reversed, and run forwards): null
// for none.
Backend* order_twin(const Backend& b);

// "<kind>_backward" of a forward case, as autograd builds it: inputs =
// forward inputs, forward outputs (`ys`), one gradient per output (`dys`);
// outputs = the gradients of the inputs whose grad_mask entry is 1 (zeros).
inline NodeCase backward_case(const NodeCase& fwd, std::vector<HostTensor> ys, std::vector<HostTensor> dys, std::vector<int64_t> grad_mask) {
  NodeCase b;
  b.kind = fwd.kind + "_backward";
  b.attrs = fwd.attrs;
  b.attrs["grad_mask"] = grad_mask;
  b.inputs = fwd.inputs;
  for (HostTensor& y : ys) b.inputs.push_back(std::move(y));
  for (HostTensor& dy : dys) b.inputs.push_back(std::move(dy));
  for (size_t i = 0; i < grad_mask.size(); ++i)
    if (grad_mask[i]) b.outputs.push_back(f32_zeros(fwd.inputs[i].shape));
  return b;
}

// Fills `c`'s outputs with values no kernel result could keep by accident.
// Every kernel, reference and fast, CPU and CUDA, writes all of its
// outputs: the plan executor allocates node outputs without zero-filling
// them (plan_executor.cpp, run_local), and these tables are where that
// contract is checked, for every kernel kind they cover (all of them).
inline void poison_outputs(NodeCase& c) {
  for (HostTensor& t : c.outputs) {
    for (float& v : t.f) v = std::numeric_limits<float>::quiet_NaN();
    for (int32_t& v : t.i) v = 0x5a5a5a5a;
  }
}

// bf16 activation storage (Backend::bf16_storage): `c` with every f32
// operand held in bf16 must give, bit for bit, the f32 kernel's outputs on
// the bf16-rounded inputs, rounded to bf16: the conversion at the kernel
// boundary adds nothing else (and every output element is still written).
inline void expect_bf16_storage(Backend& b, const std::string& op, const std::string& name, const NodeCase& c) {
  NodeCase rounded = c;
  for (HostTensor& t : rounded.inputs)
    for (float& v : t.f) v = cpu::round_to_bf16(v);
  std::vector<HostTensor> want = run_case(b, rounded);
  std::vector<HostTensor> got = run_case(b, c, true);
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    int64_t differ = 0, first = -1;
    for (size_t i = 0; i < got[k].f.size(); ++i)
      if (cpu::f32_bits(got[k].f[i]) != cpu::f32_bits(cpu::round_to_bf16(want[k].f[i])) && differ++ == 0)
        first = static_cast<int64_t>(i);
    INFO(b.name() << " " << op << " " << name << " output " << k << " under bf16 storage: " << differ
                  << " element(s) differ from the f32 kernel on bf16 inputs, first at " << first);
    CHECK(differ == 0);
    CHECK(got[k].i == want[k].i);
  }
}

// Runs `c` on the reference and on every tested backend and compares each
// output (named by `names`, one per output) with tolerance `tol` (0:
// bit-identical; see expect_close). `tested_init`, when given, replaces the
// initial contents of the tested backends' outputs (garbage that a kernel
// must overwrite). Returns the reference outputs (inputs of later cases).
inline std::vector<HostTensor> expect_node(const std::string& op, const std::string& name, const NodeCase& c,
                                           const std::vector<std::string>& names, double tol, double scale_floor = 0,
                                           const std::vector<Buf>& tested_init = {}) {
  REQUIRE(names.size() == c.outputs.size());
  std::vector<HostTensor> want = run_case(reference_backend(), c);
  {  // the reference kernels too write every output element (nns run --reference)
    NodeCase poisoned = c;
    poison_outputs(poisoned);
    std::vector<HostTensor> again = run_case(reference_backend(), poisoned);
    for (size_t k = 0; k < names.size(); ++k)
      expect_close("reference " + op + " (outputs poisoned)", name, names[k], as_floats(again[k]), as_floats(want[k]),
                   0);
  }
  NodeCase tested = c;
  for (size_t k = 0; k < tested_init.size(); ++k) tested.outputs[k].f = tested_init[k];
  // Unless a case gives its own, the tested backends' outputs start as
  // garbage (NaN, or a large int): every kernel writes all of its outputs,
  // so the executor hands node outputs over without zero-filling them.
  if (tested_init.empty()) poison_outputs(tested);
  std::map<const Backend*, std::vector<HostTensor>> results;
  for (Backend* b : tested_backends()) {
    if (!b->has_kernel(c.kind)) {
      INFO(b->name() << " has no kernel for " << c.kind);
      CHECK(kernel_pending(*b, c.kind));
      continue;
    }
    std::vector<HostTensor> got = run_case(*b, tested);
    for (size_t k = 0; k < names.size(); ++k) {
      std::string label = tested_backends().size() > 1 ? b->name() + " " + op : op;
      expect_close(label, name, names[k], as_floats(got[k]), as_floats(want[k]), tol, scale_floor);
    }
    results[b] = std::move(got);
  }
  if (Backend* b = tested_backends()[0]; b->bf16_storage() && b->has_kernel(c.kind))
    expect_bf16_storage(*b, op, name, tested);
  for (auto& [b, got] : results)
    if (const Backend* twin = order_twin(*b); twin && results.count(twin))
      for (size_t k = 0; k < names.size(); ++k)
        expect_close(b->name() + " vs " + twin->name() + " " + op, name, names[k], as_floats(got[k]), as_floats(results[twin][k]), 0);
  return want;
}

// Outputs of the first tested backend (for checks against known values,
// e.g. a permute's backward that must give back the input). Where that
// backend's kernel is pending (kernel_pending), the reference's outputs:
// the known values then check the oracle.
inline std::vector<HostTensor> run_tested(const NodeCase& c) {
  Backend& b = *tested_backends()[0];
  if (!b.has_kernel(c.kind)) {
    INFO(b.name() << " has no kernel for " << c.kind);
    CHECK(kernel_pending(b, c.kind));
    return run_case(reference_backend(), c);
  }
  NodeCase poisoned = c;  // as in expect_node: the kernel must write every output element
  poison_outputs(poisoned);
  return run_case(b, poisoned);
}

}  // namespace nns::backend::test
