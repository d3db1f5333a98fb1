// The kernel cache: each distinct kernel elaborated once per lowering.
//
// A rank's kernels are its sub-ops elaborated on their slices (the op's
// body run again in the interpreter), differentiated, split into B and W
// and given release lists (lower_kernels.cpp). AlphaFold2's 48 Evoformer
// blocks, or Swin's identical blocks, make the same kernel over and over:
// elaborating each again cost most of `nns check`'s capacity check and every
// rank process's start-up. Two sub-ops get the same body when everything
// that body is made from is equal:
//   - the elaboration key (sema::Interpreter::instantiation_key: the
//     definition called, its tensor counts per parameter, its arguments
//     after the split divisors and reshape's target, the input dtypes, the
//     slice shapes);
//   - the position attrs (sema::apply_slice_position: dropout's element
//     offset, a vocab shard's rows), which the backward nodes copy: every
//     attr of each forward node that has a slice rule, after the rule ran
//     for this sub-op;
//   - whether it has a backward, which inputs get a gradient (wrt), which
//     inputs are parameters and whether its segment splits B from W (the
//     zero-bubble split), and whether it is recomputed (its release lists).
// The first kernel of a key is made as without the cache; later ones copy
// its local tensors and nodes into the rank's local graph, ids shifted.
// What else differs between the two is rewritten: the names that carry a
// local tensor id ("t17", "grad_17" as a '.'-separated component) and the
// locations equal to the first op's call site (its op's call site instead).
// A body is a function of these by construction (the interpreter names
// each elaboration's ops from zero, instantiate.cpp); the tests compare
// every kernel and every local tensor and node, field by field, with the
// cache and without it (tests/plan/kernel_cache_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/lowering/rank_program.h"

namespace nns::backend {

struct LowerOptions;

namespace detail {

// One kernel as first made: its local tensors [tensor_base, +tensors.size())
// and nodes [node_base, +nodes.size()) of the program it was made in, and
// the kernel's fields that name them (ids as there).
struct KernelTemplate {
  int tensor_base = 0, node_base = 0;
  std::vector<sema::TensorInfo> tensors;
  std::vector<sema::OpNode> nodes;
  SubOpKernel body;      // inst, dy, bwd, wgrad_nodes and the release lists
  front::SourceLoc loc;  // the call site of the op it was made for
};

class KernelCache {
 public:
  // The forward nodes of an elaboration that have a slice rule, before the
  // rule ran (index into inst.nodes, the node): what a later sub-op with
  // the same elaboration key applies its own position to.
  using Positioned = std::vector<std::pair<size_t, sema::OpNode>>;
  const Positioned* positioned(const std::string& elaboration_key) const;
  void set_positioned(const std::string& elaboration_key, Positioned nodes);
  const KernelTemplate* find(const std::string& kernel_key) const;
  void add(const std::string& kernel_key, KernelTemplate t);
  int64_t hits = 0, misses = 0;

 private:
  std::unordered_map<std::string, Positioned> positioned_;
  std::unordered_map<std::string, KernelTemplate> kernels_;
};

// Whether a lowering with `opts` uses the cache: it elaborates, it has an
// elaboration key, LowerOptions::kernel_cache is set and NNS_KERNEL_CACHE
// is not 0.
bool kernel_cache_wanted(const LowerOptions& opts);

// The attrs of `nodes` as key bytes (every attr, names and values exact).
std::string attrs_key(const std::vector<const sema::OpNode*>& nodes);

// kn's local tensors and nodes, [tensor_base, end) and [node_base, end) of
// `local` (all it made), as a template. Throws LoweringError ("internal:")
// when one of them refers to a tensor or node outside those ranges: such a
// body could not be copied.
KernelTemplate cut_template(const sema::Graph& local, int tensor_base, int node_base, const SubOpKernel& kn,
                            front::SourceLoc loc);

// Appends t's tensors and nodes to `local` and sets kn's body fields to
// them (kn.elaborated too); `loc`: the call site of kn's op.
void paste_template(const KernelTemplate& t, sema::Graph& local, SubOpKernel& kn, front::SourceLoc loc);
// kn's body (inst, dy, bwd, wgrad_nodes, release lists) becomes `body`'s,
// ids as they are: paste_template's after shifting them, or, under
// LowerOptions::shared_kernel_bodies, an earlier kernel's of the program.
void set_body(SubOpKernel& kn, SubOpKernel body);

// A name of the template with the tensor ids it carries shifted: each
// '.'-separated component "t<id>" or "grad_<id>" whose id lies in
// [base, base + count) gets id + shift.
std::string shift_name(const std::string& name, int base, int count, int shift);

}  // namespace detail

// Every local tensor and node of `p` and every field of its kernels, as
// text (ids, names, locations, attrs, releases): what the kernel cache
// tests compare with the cache and without it.
std::string kernel_bodies_text(const RankProgram& p);

}  // namespace nns::backend
