// find_megatron_structure (search.h): Megatron-LM's layout applies to a
// model with Transformer blocks, which are recognised here by the shape of
// the graph (op classes, annotations, data flow), never by qualified names
// or the model's name: a user's BERT, T5 or Llama is found as GPT is, and a
// U-Net or a ResNet is not (comparing them with "Megatron-style" would
// compare against a plan nobody would write for them).
#include <algorithm>
#include <deque>
#include <string>

#include "backend/planner/search.h"

namespace nns::planner {

namespace {

bool splits(const sema::PartitionEffect& e) { return e.kind == sema::PartitionEffect::Split; }

// A choice of `op` that splits a weight and leaves every activation input
// whole.
bool weights_only(const SearchOp& op, const SearchChoice& c) {
  bool weight = false;
  for (size_t k = 0; k < c.in.size() && k < op.in_param.size(); ++k) {
    if (!splits(c.in[k])) continue;
    if (!op.in_param[k]) return false;
    weight = true;
  }
  return weight;
}

bool has_softmax(const SearchOp& op) {
  for (const NodeWork& w : op.parts)
    if (w.op == "softmax" || w.kind == "sdpa" || w.kind == "sdpa_bias") return true;
  return false;
}

// The head split of an attention op: one op with a softmax in its body
// whose split of the weights alone leaves partial sums (each device its
// heads, the output projection summed). -1: not an attention op.
int attention_choice(const SearchOp& op) {
  if (!has_softmax(op)) return -1;
  for (size_t i = 0; i < op.choices.size(); ++i) {
    const SearchChoice& c = op.choices[i];
    if (!c.is_batch && c.reduce && weights_only(op, c)) return static_cast<int>(i);
  }
  return -1;
}

// A linear's column split: a matrix product with a weight, split along the
// identifier that is its output's last dim (not a convolution's channels,
// dim 1 of an image). -1: none.
int column_choice(const SearchOp& op) {
  if (op.op_class != "matmul" || op.out_rank.empty() || op.out_rank[0] < 2 || !op.parts.empty()) return -1;
  for (size_t i = 0; i < op.choices.size(); ++i) {
    const SearchChoice& c = op.choices[i];
    if (c.is_batch || c.reduce || !weights_only(op, c) || c.out.empty()) continue;
    if (splits(c.out[0]) && c.out[0].dim == op.out_rank[0] - 1) return static_cast<int>(i);
  }
  return -1;
}

// A linear's row split: the contraction, splitting the weight and the
// activation input `k`, partial sums out. -1: none.
int row_choice(const SearchOp& op, int k) {
  if (op.op_class != "matmul" || !op.parts.empty() || k < 0 || static_cast<size_t>(k) >= op.in_param.size() ||
      op.in_param[k])
    return -1;
  for (size_t i = 0; i < op.choices.size(); ++i) {
    const SearchChoice& c = op.choices[i];
    if (c.is_batch || !c.reduce || !splits(c.in[k])) continue;
    bool weight = false;
    for (size_t j = 0; j < c.in.size(); ++j) weight = weight || (op.in_param[j] && splits(c.in[j]));
    if (weight) return static_cast<int>(i);
  }
  return -1;
}

// An op between the two linears of an MLP pair: no weight of its own other
// than a bias or a gate's elementwise factor, no matrix product, no body.
bool elementwise(const SearchOp& op) { return op.op_class == "elementwise" && op.parts.empty(); }

// The choice of an elementwise op that splits the hidden features (size
// `hidden`) of its input 0, the last such dim. -1: none.
int hidden_choice(const SearchOp& op, int64_t hidden) {
  int best = -1;
  for (size_t i = 0; i < op.choices.size(); ++i) {
    const SearchChoice& c = op.choices[i];
    if (c.is_batch || c.reduce || c.size != hidden || c.idx != 0) continue;
    if (best < 0 || c.dim > op.choices[best].dim) best = static_cast<int>(i);
  }
  return best;
}

struct Finder {
  const SearchModel& m;
  MegatronStructure s;
  std::vector<bool> in_pair;  // per op: the column linear of an MLP pair

  explicit Finder(const SearchModel& model) : m(model), in_pair(model.ops.size(), false) {
    s.choice.assign(m.ops.size(), -1);
  }

  template <class Fn>
  void for_each_reader(int opi, Fn&& fn) const {
    for (int t : m.ops[opi].out_tensor)
      if (t >= 0)
        for (const auto& [c, ck] : m.consumers[t]) fn(c, ck);
  }

  // From column linear `col`: the row linears reached through elementwise
  // ops only, with the hidden size; records the pair's layout.
  bool mlp_pair(int col) {
    const SearchOp& a = m.ops[col];
    const int ca = column_choice(a);
    if (ca < 0) return false;
    const int64_t hidden = a.choices[ca].size;
    std::vector<int> between, rows, rows_choice;
    std::deque<int> todo{col};
    std::vector<bool> seen(m.ops.size(), false);
    seen[col] = true;
    while (!todo.empty() && between.size() < 16) {
      const int o = todo.front();
      todo.pop_front();
      for_each_reader(o, [&](int c, int ck) {
        if (seen[c]) return;
        seen[c] = true;
        const int r = row_choice(m.ops[c], ck);
        if (r >= 0 && m.ops[c].choices[r].size == hidden) {
          rows.push_back(c);
          rows_choice.push_back(r);
        } else if (elementwise(m.ops[c]) && hidden_choice(m.ops[c], hidden) >= 0) {
          between.push_back(c);
          todo.push_back(c);
        }
      });
    }
    if (rows.empty()) return false;
    s.choice[col] = ca;
    for (size_t i = 0; i < rows.size(); ++i) s.choice[rows[i]] = rows_choice[i];
    for (int b : between) s.choice[b] = hidden_choice(m.ops[b], hidden);
    return true;
  }

  // Whether an MLP pair's column linear lies downstream of attention op
  // `att` before the next attention op (within a Transformer block's few
  // ops: norms, residual adds).
  bool mlp_after(int att) const {
    std::deque<std::pair<int, int>> todo{{att, 0}};
    std::vector<bool> seen(m.ops.size(), false);
    while (!todo.empty()) {
      const int o = todo.front().first, depth = todo.front().second;  // the lambda captures depth
      todo.pop_front();
      if (depth >= 12) continue;
      bool hit = false;
      for_each_reader(o, [&](int c, int) {
        if (seen[c] || hit) return;
        seen[c] = true;
        if (in_pair[c])
          hit = true;
        else if (attention_choice(m.ops[c]) < 0)
          todo.push_back({c, depth + 1});
      });
      if (hit) return true;
    }
    return false;
  }

  void run() {
    for (size_t i = 0; i < m.ops.size(); ++i)
      if (mlp_pair(static_cast<int>(i))) {
        in_pair[i] = true;
        ++s.mlp_pairs;
      }
    for (size_t i = 0; i < m.ops.size(); ++i) {
      const int c = attention_choice(m.ops[i]);
      if (c < 0) continue;
      ++s.attention_ops;
      s.choice[i] = c;
      if (mlp_after(static_cast<int>(i))) ++s.blocks;
    }
  }
};

}  // namespace

std::string MegatronStructure::describe() const {
  if (found()) return std::to_string(blocks) + " attention + MLP block(s)";
  if (attention_ops == 0 && mlp_pairs == 0) return "no attention op and no MLP of column/row linears";
  if (attention_ops == 0)
    return "no attention op (" + std::to_string(mlp_pairs) + " MLP pair(s) of column/row linears)";
  if (mlp_pairs == 0) return "no MLP of column/row linears (" + std::to_string(attention_ops) + " attention op(s))";
  return "no attention op followed by an MLP of column/row linears";
}

MegatronStructure find_megatron_structure(const SearchModel& m) {
  Finder f(m);
  f.run();
  if (!f.s.found()) f.s.choice.assign(m.ops.size(), -1);
  return f.s;
}

}  // namespace nns::planner
