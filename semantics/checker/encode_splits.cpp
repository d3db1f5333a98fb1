// Split legality, coverage and devices: the per-op rules.
//
// The checker does not trust how the plan builtins computed slices: for
// every split it re-derives, from the op's annotation alone, what each part
// must read and write, and compares with the slices the Plan holds. The
// whole op must touch complete tensors; each split's parts must tile their
// parent (no gap, no overlap along the split identifier, partial sums
// refined and never claimed whole). By induction the leaves then compute
// every element of every output exactly once per value chunk. Legality is
// checked on the same walk: the identifier is splittable per the
// annotation and the count divides its size.
#include <algorithm>
#include "semantics/check_deadline.h"

#include "semantics/checker/encoder.h"
#include "semantics/op_registry.h"

namespace nns::sema::check {

namespace {

std::string slice_text(const OperandSlice& s) { return s.to_string(); }

std::string operand_name(bool output, size_t k) { return (output ? "output " : "input ") + std::to_string(k); }

// What one part of an even split must touch of its parent's operand slice.
OperandSlice refine(const OperandSlice& parent, const PartitionEffect& e, int index, int num) {
  OperandSlice out = parent;
  if (!parent.tensor) return out;
  if (e.kind == PartitionEffect::Split && e.dim >= 0 && e.dim < static_cast<int>(parent.length.size())) {
    int64_t piece = parent.length[e.dim] / num;
    out.start[e.dim] = parent.start[e.dim] + piece * index;
    out.length[e.dim] = piece;
  } else if (e.kind == PartitionEffect::PartialSum) {
    out.value_index = parent.value_index * num + index;
    out.value_parts = parent.value_parts * num;
  }
  return out;
}

bool same_slice(const OperandSlice& a, const OperandSlice& b) {
  if (a.tensor != b.tensor) return false;
  if (!a.tensor) return true;
  return a.start == b.start && a.length == b.length && a.value_index == b.value_index && a.value_parts == b.value_parts;
}

// same_slice(have, refine(parent, e, index, num)) without building the
// refined slice: the coverage check compares every part of every split (a
// million sub-ops at 1024 devices), and the copies were its cost.
bool is_refined(const OperandSlice& have, const OperandSlice& parent, const PartitionEffect& e, int index, int num) {
  if (!parent.tensor) return same_slice(have, parent);
  const bool split = e.kind == PartitionEffect::Split && e.dim >= 0 && e.dim < static_cast<int>(parent.length.size());
  const bool partial = !split && e.kind == PartitionEffect::PartialSum;
  if (!split && !partial) return same_slice(have, parent);
  if (!have.tensor || have.start.size() != parent.start.size() || have.length.size() != parent.length.size())
    return false;
  for (size_t d = 0; d < parent.length.size(); ++d) {
    if (split && static_cast<int>(d) == e.dim) continue;
    if (have.start[d] != parent.start[d] || have.length[d] != parent.length[d]) return false;
  }
  if (split) {
    const size_t d = static_cast<size_t>(e.dim);
    const int64_t piece = parent.length[d] / num;
    return have.start[d] == parent.start[d] + piece * index && have.length[d] == piece &&
           have.value_index == parent.value_index && have.value_parts == parent.value_parts;
  }
  return have.value_index == parent.value_index * num + index && have.value_parts == parent.value_parts * num;
}

// Why `id` cannot be split on this op (it is not in the transform space).
std::string unsplittable_reason(const OpNode& n, const std::string& id) {
  std::string anno = "\"" + n.anno.anno.to_string() + "\"";
  if (id == "value") return "op '" + n.name + "' (" + n.kind + ") cannot be split by value: it is not linear in its first input";
  bool known = false, frozen = false, numeric = false, later = false;
  std::string bracket;
  for (const auto* side : {&n.anno.anno.inputs, &n.anno.anno.outputs})
    for (const OperandAnno& o : *side)
      for (const DimAnno& d : o.dims)
        for (size_t k = 0; k < d.ids.size(); ++k)
          if (d.ids[k].name == id) {
            known = true;
            frozen = frozen || d.ids[k].reduce == Reduce::Frozen;
            numeric = numeric || d.ids[k].numeric;
            if (k > 0) {
              later = true;
              bracket = "(";
              for (size_t j = 0; j < d.ids.size(); ++j) bracket += (j ? " " : "") + d.ids[j].name;
              bracket += ")";
            }
          }
  if (!known) return "op '" + n.name + "' has no dimension '" + id + "' to split (annotation " + anno + ")";
  if (later) return "cannot split '" + id + "' of op '" + n.name + "': only the first identifier of the bracket " + bracket + " can be split";
  if (numeric) return "cannot split the literal dimension '" + id + "' of op '" + n.name + "'";
  if (frozen) return "cannot split '" + id + "^' of op '" + n.name + "': its annotation " + anno + " marks it not partitionable";
  return "'" + id + "' of op '" + n.name + "' cannot be split";
}

class SplitPass {
 public:
  explicit SplitPass(Encoder& e) : e_(e), g_(e.g), p_(e.plan) {}

  void run() {
    for (size_t node = 0; node < p_.root_of_node.size(); ++node) {
      int root = p_.root_of_node[node];
      if (root < 0) continue;
      check_root(root);
      std::map<std::string, int64_t> divisors;
      walk(root, divisors);
    }
  }

 private:
  // The whole op reads and writes complete tensors, whole values.
  void check_root(int root) {
    const SubOp& s = p_.subops[root];
    const OpNode& n = g_.node(s.node);
    SubOp whole = whole_op(g_, s.node);
    for (int side = 0; side < 2; ++side) {
      const auto& have = side ? s.outputs : s.inputs;
      const auto& want = side ? whole.outputs : whole.inputs;
      e_.stats.ground_checks += static_cast<int64_t>(want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        if (k < have.size() && same_slice(have[k], want[k])) continue;
        Conflict c;
        c.directives.push_back(first_directive(root));
        c.message = "op '" + n.name + "' as a whole must cover its complete " + operand_name(side, k) + " " + slice_text(want[k]) +
                    ", but the plan's op covers " + (k < have.size() ? slice_text(have[k]) : std::string("nothing"));
        e_.conflict(c);
        return;
      }
    }
  }

  // The directive responsible for a sub-op tree: its first split, or its placement.
  int first_directive(int sub) {
    const SubOp& s = p_.subops[sub];
    if (!s.children.empty()) return e_.trans_of(s.children[0]);
    return e_.place_of(sub);
  }

  void walk(int sub, std::map<std::string, int64_t>& divisors) {
    const SubOp& s = p_.subops[sub];
    if (s.children.empty()) {
      check_devices(sub);
      return;
    }
    if (!s.devices.empty()) {
      Conflict c;
      c.directives = {e_.trans_of(s.children[0]), e_.place_of(sub)};
      c.message = e_.part_label(sub) + " is both split into parts and placed as a whole";
      e_.conflict(c);
    }
    if (!check_split(sub, divisors)) return;  // its parts cannot be judged against an illegal split
    const SubOp& first = p_.subops[s.children[0]];
    bool value = first.split_id == "value";
    int64_t saved = value ? 1 : divisors[first.split_id];
    if (!value) divisors[first.split_id] = saved * static_cast<int64_t>(s.children.size());
    CheckDeadline::poll();
    for (int c : s.children) walk(c, divisors);
    if (!value) divisors[first.split_id] = saved;
  }

  void check_devices(int leaf) {
    const SubOp& s = p_.subops[leaf];
    ++e_.stats.ground_checks;
    if (s.devices.empty()) {
      Conflict c;
      c.directives = {e_.place_of(leaf)};
      c.message = e_.part_label(leaf) + " runs on no device: assign or replicate it (e.g. replicate(unassigned(), 0..ngpus))";
      e_.conflict(c);
      return;
    }
    for (size_t i = 0; i < s.devices.size(); ++i) {
      int d = s.devices[i];
      if (d < 0 || d >= p_.ngpus) {
        Conflict c;
        c.directives = {e_.place_of(leaf)};
        c.message = e_.part_label(leaf) + " is placed on device " + std::to_string(d) + ", but the plan runs on " +
                    std::to_string(p_.ngpus) + " device(s), numbered 0.." + std::to_string(p_.ngpus - 1);
        e_.conflict(c);
        return;
      }
      for (size_t j = 0; j < i; ++j)
        if (s.devices[j] == d) {
          Conflict c;
          c.directives = {e_.place_of(leaf)};
          c.message = e_.part_label(leaf) + " is placed on device " + std::to_string(d) + " twice";
          e_.conflict(c);
          return;
        }
    }
  }

  // One split: its shape in the tree, legality, divisibility, then coverage
  // of every operand by its parts. False when the split itself is illegal.
  bool check_split(int sub, const std::map<std::string, int64_t>& divisors) {
    const SubOp& s = p_.subops[sub];
    const OpNode& n = g_.node(s.node);
    const int num = static_cast<int>(s.children.size());
    const SubOp& first = p_.subops[s.children[0]];
    const std::string& id = first.split_id;
    int dir = e_.trans_of(s.children[0]);
    e_.stats.ground_checks += num;
    for (int i = 0; i < num; ++i) {
      const SubOp& c = p_.subops[s.children[i]];
      if (c.split_id != id || c.split_num != num || c.split_index != i || c.node != s.node || c.parent != sub ||
          c.inputs.size() != s.inputs.size() || c.outputs.size() != s.outputs.size()) {
        Conflict k;
        k.directives = {dir};
        k.message = "the parts of " + e_.part_label(sub) + " do not form one split: part " + std::to_string(i) + " says it is part " +
                    std::to_string(c.split_index) + " of " + std::to_string(c.split_num) + " on '" + c.split_id + "', its parent has " +
                    std::to_string(num) + " parts on '" + id + "'";
        e_.conflict(k);
        return false;
      }
    }
    const TransformChoice* choice = nullptr;
    for (const TransformChoice& c : space_of(s.node))
      if (id == "value" ? c.kind == TransformChoice::Value : (c.kind == TransformChoice::Dim && c.id == id))
        choice = &c;
    ++e_.stats.ground_checks;
    if (!choice) {
      Conflict k;
      k.directives = {dir};
      k.message = unsplittable_reason(n, id);
      e_.conflict(k);
      return false;
    }
    // Divisibility: the parent's extent along `id`, in units of `id`.
    if (choice->kind == TransformChoice::Dim) {
      int64_t divisor_above = divisors.count(id) ? divisors.at(id) : 1;
      e_.splits.push_back({s.node, sub, id, divisor_above * num, num, dir});
      int64_t local = -1;
      for (int side = 0; side < 2 && local < 0; ++side) {
        const auto& effects = side ? choice->outputs : choice->inputs;
        const auto& slices = side ? s.outputs : s.inputs;
        const auto& tensors = side ? n.outputs : n.inputs;
        for (size_t k = 0; k < effects.size() && k < slices.size() && local < 0; ++k) {
          if (effects[k].kind != PartitionEffect::Split || !slices[k].tensor || k >= tensors.size()) continue;
          int d = effects[k].dim;
          int64_t full = g_.tensor(tensors[k]).shape[d];
          int64_t factor = choice->size > 0 ? full / choice->size : 1;  // the bracket's other identifiers
          if (factor <= 0 || slices[k].length[d] % factor != 0) continue;
          local = slices[k].length[d] / factor;
        }
      }
      ++e_.stats.ground_checks;
      if (local >= 0 && local % num != 0) {
        Conflict k;
        k.directives = {dir};
        k.message = "cannot split '" + id + "' of " + e_.part_label(sub) + " into " + std::to_string(num) + " parts: its size " +
                    std::to_string(local) + " is not divisible by " + std::to_string(num);
        e_.conflict(k);
        return false;
      }
    }
    check_coverage(sub, *choice, dir);
    return true;
  }

  // transform_space of op `node`, built once per op: every split of its
  // tree looks its identifier up there (building it per split was most of
  // the pass at a million sub-ops).
  const std::vector<TransformChoice>& space_of(int node) {
    if (space_node_ != node) {
      const OpNode& n = g_.node(node);
      const OpRow* row = n.composite ? nullptr : find_op_row(n.kind);
      space_ = transform_space(n.anno, row && row->value_split);
      space_node_ = node;
    }
    return space_;
  }

  void check_coverage(int sub, const TransformChoice& choice, int dir) {
    const SubOp& s = p_.subops[sub];
    const int num = static_cast<int>(s.children.size());
    const std::string& id = p_.subops[s.children[0]].split_id;
    for (int side = 0; side < 2; ++side) {
      const auto& effects = side ? choice.outputs : choice.inputs;
      const size_t count = side ? s.outputs.size() : s.inputs.size();
      for (size_t k = 0; k < count; ++k) {
        const OperandSlice& parent = side ? s.outputs[k] : s.inputs[k];
        PartitionEffect eff = k < effects.size() ? effects[k] : PartitionEffect{PartitionEffect::Replicated, -1};
        e_.stats.ground_checks += num;
        bool all_ok = true;
        for (int i = 0; i < num; ++i) {
          const SubOp& c = p_.subops[s.children[i]];
          const OperandSlice& have = side ? c.outputs[k] : c.inputs[k];
          if (!is_refined(have, parent, eff, i, num)) all_ok = false;
        }
        if (all_ok) continue;
        report_coverage(sub, side == 1, k, parent, eff, id, dir);
        return;  // one explanation per split
      }
    }
  }

  // Explains why the parts of `sub` do not cover operand k exactly once.
  void report_coverage(int sub, bool output, size_t k, const OperandSlice& parent, const PartitionEffect& eff, const std::string& id,
                       int dir) {
    const SubOp& s = p_.subops[sub];
    const int num = static_cast<int>(s.children.size());
    auto part = [&](int i) -> const OperandSlice& {
      const SubOp& c = p_.subops[s.children[i]];
      return output ? c.outputs[k] : c.inputs[k];
    };
    std::string where = operand_name(output, k) + " of " + e_.part_label(sub);
    Conflict c;
    c.directives = {dir};
    if (eff.kind == PartitionEffect::Split && parent.tensor) {
      int d = eff.dim;
      // Intervals along the split dim: overlap or gap?
      std::vector<std::pair<int64_t, int>> order;
      for (int i = 0; i < num; ++i) order.push_back({part(i).start[d], i});
      std::sort(order.begin(), order.end());
      int64_t covered = parent.start[d];
      for (auto [lo, i] : order) {
        int64_t hi = lo + part(i).length[d];
        if (lo > covered) {
          c.message = "the parts of the split on '" + id + "' leave a gap: no part computes " + interval_text(covered, lo) + " of dim " +
                      std::to_string(d) + " of " + where;
          e_.conflict(c);
          return;
        }
        if (lo < covered) {
          int j = -1;
          for (auto [lo2, i2] : order)
            if (i2 != i && lo2 < hi && lo2 + part(i2).length[d] > lo) j = i2;
          c.message = "the parts of the split on '" + id + "' overlap: parts " + std::to_string(std::min(i, j)) + " and " +
                      std::to_string(std::max(i, j)) + " both compute " + interval_text(lo, std::min(hi, covered)) + " of dim " +
                      std::to_string(d) + " of " + where;
          e_.conflict(c);
          return;
        }
        covered = std::max(covered, hi);
      }
      if (covered < parent.start[d] + parent.length[d]) {
        c.message = "the parts of the split on '" + id + "' leave a gap: no part computes " +
                    interval_text(covered, parent.start[d] + parent.length[d]) + " of dim " + std::to_string(d) + " of " + where;
        e_.conflict(c);
        return;
      }
    }
    if (eff.kind == PartitionEffect::PartialSum) {
      for (int i = 0; i < num; ++i) {
        const OperandSlice& a = part(i);
        if (a.value_parts == parent.value_parts && a.value_index == parent.value_index) {
          c.message = "part " + std::to_string(i) + " of the split on '" + id + "' claims " + where +
                      " as a complete value, but each part computes only a partial sum: adding the " + std::to_string(num) +
                      " parts would count it " + std::to_string(num) + " times";
          e_.conflict(c);
          return;
        }
        for (int j = 0; j < i; ++j)
          if (part(j).value_index == a.value_index && part(j).value_parts == a.value_parts) {
            c.message = "parts " + std::to_string(j) + " and " + std::to_string(i) + " of the split on '" + id +
                        "' both produce partial sum " + std::to_string(a.value_index) + "/" + std::to_string(a.value_parts) + " of " +
                        where + ": the sum would count it twice";
            e_.conflict(c);
            return;
          }
      }
    }
    for (int i = 0; i < num; ++i) {
      OperandSlice want = refine(parent, eff, i, num);
      if (same_slice(part(i), want)) continue;
      c.message = "part " + std::to_string(i) + " of the split on '" + id + "' covers " + slice_text(part(i)) + " of " + where +
                  ", but its share of the split is " + slice_text(want);
      e_.conflict(c);
      return;
    }
  }

  Encoder& e_;
  const Graph& g_;
  const Plan& p_;
  int space_node_ = -1;
  std::vector<TransformChoice> space_;
};

}  // namespace

void encode_splits(Encoder& e) { SplitPass(e).run(); }

}  // namespace nns::sema::check
