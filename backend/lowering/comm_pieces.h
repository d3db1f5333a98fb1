// Reading layouts off a plan's sub-ops (derive_communication's inputs):
// which piece of an operand each device of each leaf sub-op holds, merged
// per device (nnScaler's coshard) and fitted to an R x V x D layout.
//
// At 1024 devices a plan has close to a million leaf sub-ops; every edge of
// a tensor reads the same producer pieces and every op's input is read
// forward and backward. OperandLayouts reads each operand once: it walks an
// op's partition tree once, refers to the sub-ops' slices instead of copying
// them, and remembers the producers' layouts for every consumer and for the
// backward edges.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/lowering/adapters.h"
#include "semantics/graph.h"
#include "semantics/plan.h"

namespace nns::backend {

// One piece a device holds: a sub-op's slice, with the partial-sum label it
// carries (the slice's own, or gradient_pieces' relabelling).
struct PieceRef {
  int device = -1;
  const sema::OperandSlice* slice = nullptr;
  int64_t value_index = 0, value_parts = 1;
};

// layout_of_pieces (comm_plan.h) on references; reorders `pieces`.
bool layout_of_refs(std::vector<PieceRef>& pieces, const sema::Shape& shape, Layout& out, std::string& why);

// A layout read off pieces, or why none names them.
struct LayoutRead {
  bool ok = false;
  Layout layout;
  std::string why;
};

// The inputs' and outputs' reads of one read_all, kept for a later reader
// of the same plan: lowering's analysis (lower_internal.h) finds them in
// CommPlan::reads instead of reading every operand again (100 ms of
// AlphaFold2 dap's 32-device check). Equal reads are kept once.
class OperandReads {
 public:
  // Null when read_all did not read it.
  const LayoutRead* input(int node, size_t k) const { return find(in_, node, k); }
  const LayoutRead* output(int node, size_t o) const { return find(out_, node, o); }
  // Whether these are reads of (g, plan): a cheap guard (its name, node
  // and sub-op counts) against reads of another plan; the caller passes
  // the communication derived from this one (LowerOptions::comm).
  bool of(const sema::Graph& g, const sema::Plan& plan) const {
    return nodes_ == g.nodes().size() && subops_ == plan.subops.size() && plan_ == plan.name;
  }

 private:
  friend class OperandLayouts;
  static uint64_t key(int node, size_t k) { return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | k; }
  const LayoutRead* find(const std::unordered_map<uint64_t, uint32_t>& m, int node, size_t k) const {
    auto it = m.find(key(node, k));
    return it == m.end() ? nullptr : &distinct_[it->second];
  }
  std::vector<LayoutRead> distinct_;
  std::unordered_map<uint64_t, uint32_t> in_, out_;  // (node, operand) -> distinct_ index
  size_t nodes_ = 0, subops_ = 0;
  std::string plan_;
};

class OperandLayouts {
 public:
  OperandLayouts(const sema::Graph& g, const sema::Plan& plan)
      : g_(g), plan_(plan), leaves_(plan.root_of_node.size()), leaves_known_(plan.root_of_node.size(), 0) {}
  // Output o of top-level op `node`, remembered (every consumer reads it).
  const LayoutRead& output(int node, size_t o);
  // Input k as the op's leaves read it, and the gradient its backward
  // produces for that input (what input_pieces / gradient_pieces give).
  LayoutRead input(int node, size_t k);
  LayoutRead gradient(int node, size_t k);
  // Reads every operand of every op (outputs, inputs, the gradients of
  // float inputs that are not data) on all cores (parallel.h), for the
  // calls above to find: a whole plan's derivation reads them all anyway.
  // Layers repeat: operands whose pieces are the same (devices, slices and
  // shape, compared in full) are read once (Swin coshard at 1024 devices:
  // 192 distinct of 5781). Returns how many reads ran, of how many operands.
  // Without `gradients`, the outputs and inputs only (lowering's analysis).
  // `keep` (not null): the inputs' and outputs' reads, kept there too.
  std::pair<size_t, size_t> read_all(bool gradients = true, OperandReads* keep = nullptr);

 private:
  enum Side { Out, In, Grad };
  struct Request {
    Side side;
    int node;
    size_t k;
  };
  // What a read depends on: the operand's shape and, leaf by leaf, the
  // devices and the slice (its partial-sum label too, except for a
  // gradient, which relabels). Equal content, equal read.
  uint64_t content_hash(const Request& r) const;
  bool same_content(const Request& a, const Request& b) const;
  const sema::OperandSlice& slice_of(const Request& r, int leaf) const;
  const std::vector<int>& leaves(int node);
  LayoutRead read(std::vector<PieceRef>& refs, const sema::Shape& shape) const;
  // The reads themselves, on leaves already known (read_all runs them on
  // several threads).
  LayoutRead read_output(int node, size_t o) const;
  LayoutRead read_input(int node, size_t k) const;
  LayoutRead read_gradient(int node, size_t k) const;
  const sema::Graph& g_;
  const sema::Plan& plan_;
  std::vector<std::vector<int>> leaves_;
  std::vector<char> leaves_known_;
  std::map<std::pair<int, size_t>, LayoutRead> outputs_;
  std::map<std::pair<int, size_t>, LayoutRead> inputs_, gradients_;  // read_all's, each taken once
};

}  // namespace nns::backend
