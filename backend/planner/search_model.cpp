// build_search_model: the forward graph read once into what the search
// costs (backend/planner/search.h, step 1).
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "backend/planner/program_cost.h"
#include "backend/planner/search.h"
#include "semantics/op_registry.h"

namespace nns::planner {

namespace {

// The layer a qualified name belongs to: its prefix up to the last
// ".<digits>." ("layers.0.blocks.1.attn.add#0" -> "layers.0.blocks.1."),
// "" when it has none (embedding#0, ln_f.layer_norm#0).
std::string layer_key(const std::string& name) {
  std::string key;
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] != '.' || !std::isdigit(static_cast<unsigned char>(name[i + 1]))) continue;
    size_t j = i + 1;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j < name.size() && name[j] == '.') key = name.substr(0, j + 1);
  }
  return key;
}

bool glob(const char* p, const char* s) {  // select()'s glob: '*' any run, '?' one character
  if (!*p) return !*s;
  if (*p == '*') return glob(p + 1, s) || (*s && glob(p, s + 1));
  if (*s && (*p == '?' || *p == *s)) return glob(p + 1, s + 1);
  return false;
}

// A composite node's primitive nodes (composites inside it opened), in
// body order.
std::vector<int> primitive_nodes(const sema::Graph& g, int node) {
  std::vector<int> out;
  const sema::OpNode& n = g.node(node);
  std::vector<int> stack(n.children.rbegin(), n.children.rend());
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    const sema::OpNode& c = g.node(id);
    if (!c.composite) out.push_back(id);
    for (auto it = c.children.rbegin(); it != c.children.rend(); ++it) stack.push_back(*it);
  }
  return out;
}

// What a composite op's body makes besides the op's own outputs; with
// `only`, of those only the tensors it marks.
int64_t internal_bytes(const sema::Graph& g, int node, const std::vector<int>& body,
                       const std::vector<char>* only = nullptr) {
  const sema::OpNode& n = g.node(node);
  int64_t total = 0;
  for (int id : body)
    for (int t : g.node(id).outputs)
      if ((!only || (*only)[static_cast<size_t>(t)]) &&
          std::find(n.outputs.begin(), n.outputs.end(), t) == n.outputs.end())
        total += g.tensor(t).bytes();
  return total;
}

// Per tensor: whether some backward reads its value (a consumer's, or its
// producer's reading its own output), as the lowered kernels keep it
// (backend/lowering/kernel_release.cpp); top-level ops and composite
// bodies' primitive nodes alike.
std::vector<char> read_back_tensors(const sema::Graph& g) {
  std::vector<char> read(g.tensors().size(), 0);
  for (const sema::OpNode& n : g.nodes()) {
    if (n.phase != sema::Phase::Forward || n.composite) continue;  // a composite's body nodes decide
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= 0 && sema::backward_reads_operand(n, i)) read[static_cast<size_t>(n.inputs[i])] = 1;
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] >= 0 && sema::backward_reads_operand(n, n.inputs.size() + k))
        read[static_cast<size_t>(n.outputs[k])] = 1;
  }
  return read;
}

bool operand_has(const sema::OperandAnno& a, const std::string& id) {
  for (const sema::DimAnno& d : a.dims)
    for (const sema::DimId& x : d.ids)
      if (x.name == id) return true;
  return false;
}

// The batch (dim 0 of the first tensor input, as trans(op, dim = "batch")
// reads it) and which operands carry it.
void read_batch(const sema::Graph& g, const sema::OpNode& n, SearchOp& op) {
  const sema::OpAnno& an = n.anno.anno;
  for (size_t i = 0; i < an.inputs.size(); ++i) {
    if (an.inputs[i].non_tensor || op.in_tensor[i] < 0) continue;
    if (g.tensor(op.in_tensor[i]).kind == sema::TensorKind::Param) break;
    if (auto c = sema::choice_for(n.anno, static_cast<int>(i), 0)) {
      op.batch_ok = true;
      op.batch_id = c->id;
    }
    break;
  }
  if (op.batch_ok) {
    for (size_t i = 0; i < an.inputs.size(); ++i) op.in_batch[i] = operand_has(an.inputs[i], op.batch_id);
    for (size_t i = 0; i < an.outputs.size(); ++i) op.out_batch[i] = operand_has(an.outputs[i], op.batch_id);
  }
}

// The dims an op may split along, each addressed by an input dim.
void read_choices(const sema::OpNode& n, SearchOp& op) {
  for (const sema::TransformChoice& tc : sema::transform_space(n.anno, false)) {
    if (tc.kind != sema::TransformChoice::Dim) continue;
    SearchChoice c;
    c.id = tc.id;
    c.size = tc.size;
    c.reduce = tc.reduce == sema::Reduce::Sum;
    c.in = tc.inputs;
    c.out = tc.outputs;
    c.is_batch = op.batch_ok && tc.id == op.batch_id;
    for (size_t i = 0; i < tc.inputs.size(); ++i)
      if (tc.inputs[i].kind == sema::PartitionEffect::Split && op.in_tensor[i] >= 0) {
        c.idx = static_cast<int>(i);
        c.dim = tc.inputs[i].dim;
        break;
      }
    if (c.idx < 0) continue;  // an output-only identifier: trans() addresses a choice by an input dim
    // trans(idx, dim) must name this very identifier.
    auto back = sema::choice_for(n.anno, c.idx, c.dim);
    if (!back || back->id != c.id) continue;
    op.choices.push_back(std::move(c));
  }
}

// Which of a composite's body nodes (`body`, in order) a split of the
// composite with input effects `in` divides: the split followed from the
// composite's inputs through each node's own annotation (sema::choice_for),
// as the sub-op's body runs on its slices. A node none of whose inputs is
// split runs whole in every piece (Swin's window attention: the reshape of
// its input x, 16 x a piece's share at tp 8 x coshard 2, and after the
// output projection's partial sums, the reshape of the whole output); where
// a node's annotation does not say (a reshape across the split dim), its
// outputs count as split, as before.
std::vector<char> divided_parts(const sema::Graph& g, const sema::OpNode& n, const std::vector<int>& body,
                                const std::vector<sema::PartitionEffect>& in) {
  constexpr int kUnknown = -100;  // split along a dim not followed
  std::map<int, int> split;       // tensor -> its split dim
  for (size_t k = 0; k < n.inputs.size() && k < in.size(); ++k)
    if (n.inputs[k] >= 0 && in[k].kind == sema::PartitionEffect::Split) split[n.inputs[k]] = in[k].dim;
  std::vector<char> out;
  for (int id : body) {
    const sema::OpNode& b = g.node(id);
    int at = -1, dim = kUnknown;
    for (size_t i = 0; i < b.inputs.size() && at < 0; ++i)
      if (auto it = split.find(b.inputs[i]); it != split.end()) at = static_cast<int>(i), dim = it->second;
    out.push_back(at >= 0 ? 1 : 0);
    if (at < 0) continue;
    std::optional<sema::TransformChoice> tc;
    const bool aligned = b.anno.anno.inputs.size() == b.inputs.size() && b.anno.anno.outputs.size() == b.outputs.size();
    if (aligned && dim != kUnknown) tc = sema::choice_for(b.anno, at, dim);
    for (size_t j = 0; j < b.outputs.size(); ++j) {
      if (b.outputs[j] < 0) continue;
      if (!tc)
        split[b.outputs[j]] = kUnknown;
      else if (tc->outputs[j].kind == sema::PartitionEffect::Split)
        split[b.outputs[j]] = tc->outputs[j].dim;
      // partial sums (or replicated): whole in every piece
    }
  }
  return out;
}

// One forward top-level node as the search costs it. read_back: per
// tensor, whether a backward reads its value (read_back_tensors).
SearchOp read_op(const sema::Graph& g, const sema::GradientFlow& flow, const std::vector<char>& read_back, int node) {
  const sema::OpNode& n = g.node(node);
  SearchOp op;
  op.node = node;
  op.name = n.name;
  op.kind = n.kind;
  op.op_class = op_class(n.kind);
  op.flops = 2.0 * static_cast<double>(n.macs);
  if (n.composite) {
    const std::vector<int> body = primitive_nodes(g, node);
    op.inner_bytes = internal_bytes(g, node, body);
    op.inner_kept_bytes = internal_bytes(g, node, body, &read_back);
    for (int id : body) op.parts.push_back(node_work(g, g.node(id)));
  }
  op.backward = static_cast<size_t>(node) < flow.backward.size() && flow.backward[node];
  for (const NodeWork& w : op.parts) op.score_core = op.score_core || (op.backward && w.op == "softmax");
  const sema::OpAnno& an = n.anno.anno;
  const bool aligned = an.inputs.size() == n.inputs.size() && an.outputs.size() == n.outputs.size();
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    int t = n.inputs[k];
    op.in_tensor.push_back(t);
    op.in_bytes.push_back(t >= 0 ? g.tensor(t).bytes() : 0);
    op.in_param.push_back(t >= 0 && g.tensor(t).kind == sema::TensorKind::Param);
  }
  for (int t : n.outputs) {
    op.out_tensor.push_back(t);
    op.out_bytes.push_back(t >= 0 ? g.tensor(t).bytes() : 0);
    op.out_rank.push_back(t >= 0 ? static_cast<int>(g.tensor(t).shape.size()) : 0);
    op.out_kept.push_back(t >= 0 && read_back[static_cast<size_t>(t)]);
  }
  op.in_batch.assign(op.in_tensor.size(), false);
  op.out_batch.assign(op.out_tensor.size(), false);
  if (aligned) {
    read_batch(g, n, op);
    read_choices(n, op);
  }
  if (n.composite) {
    const std::vector<int> body = primitive_nodes(g, node);
    op.part_batch.assign(body.size(), 1);
    for (SearchChoice& c : op.choices) {
      c.part_split = divided_parts(g, n, body, c.in);
      if (c.is_batch) op.part_batch = c.part_split;
    }
  }
  return op;
}

// Per tensor: its producer, consumers, whether it is a data input and its
// token count (dim 1 of a rank >= 3 tensor).
void link_tensors(const sema::Graph& g, SearchModel& m) {
  const size_t nt = g.tensors().size();
  m.consumers.assign(nt, {});
  m.producer.assign(nt, -1);
  m.producer_out.assign(nt, -1);
  m.data_input.assign(nt, false);
  for (size_t t = 0; t < nt; ++t) m.data_input[t] = g.tensor(static_cast<int>(t)).kind == sema::TensorKind::Input;
  m.seq_len.assign(nt, 0);
  for (size_t t = 0; t < nt; ++t) {
    const auto& shape = g.tensor(static_cast<int>(t)).shape;
    if (shape.size() >= 3) m.seq_len[t] = shape[1];
  }
  for (size_t i = 0; i < m.ops.size(); ++i) {
    const SearchOp& op = m.ops[i];
    for (size_t k = 0; k < op.in_tensor.size(); ++k)
      if (op.in_tensor[k] >= 0) m.consumers[op.in_tensor[k]].push_back({static_cast<int>(i), static_cast<int>(k)});
    for (size_t k = 0; k < op.out_tensor.size(); ++k)
      if (op.out_tensor[k] >= 0) {
        m.producer[op.out_tensor[k]] = static_cast<int>(i);
        m.producer_out[op.out_tensor[k]] = static_cast<int>(k);
      }
  }
}

// The graph's batch: dim 0 of the first data input an op reads along its
// batch, else the size of the first batch choice, else `fallback`.
int64_t find_graph_batch(const sema::Graph& g, const SearchModel& m, int64_t fallback) {
  for (const SearchOp& op : m.ops)
    for (size_t i = 0; i < op.in_tensor.size(); ++i)
      if (op.batch_ok && op.in_batch[i] && op.in_tensor[i] >= 0 &&
          g.tensor(op.in_tensor[i]).kind == sema::TensorKind::Input)
        return g.tensor(op.in_tensor[i]).shape.empty() ? 1 : g.tensor(op.in_tensor[i]).shape[0];
  for (const SearchOp& op : m.ops)
    if (op.batch_ok)
      for (const SearchChoice& c : op.choices)
        if (c.is_batch) return c.size;
  return fallback;
}

// Units: maximal runs of ops of one layer key, each with a select()
// pattern when "KEY*" matches exactly its ops.
void make_units(SearchModel& m) {
  for (size_t i = 0; i < m.ops.size(); ++i) {
    std::string key = layer_key(m.ops[i].name);
    if (m.units.empty() || m.units.back().key != key) m.units.push_back(SearchUnit{key, {}, -1, ""});
    m.units.back().ops.push_back(static_cast<int>(i));
  }
  m.unit_of_op.assign(m.ops.size(), -1);
  for (size_t u = 0; u < m.units.size(); ++u)
    for (int i : m.units[u].ops) m.unit_of_op[i] = static_cast<int>(u);
  for (SearchUnit& u : m.units) {
    if (u.key.empty()) continue;
    std::string pat = u.key + "*";
    size_t hits = 0;
    bool exact = true;
    for (size_t i = 0; i < m.ops.size() && exact; ++i)
      if (glob(pat.c_str(), m.ops[i].name.c_str())) {
        ++hits;
        exact = std::find(u.ops.begin(), u.ops.end(), static_cast<int>(i)) != u.ops.end();
      }
    if (exact && hits == u.ops.size()) u.select = pat;
  }
}

// Signatures: op kinds, bound annotations, operand shapes and where each
// input comes from (an op of the unit, by position, or outside).
void sign_units(const sema::Graph& g, SearchModel& m) {
  std::map<std::string, int> sigs;
  for (SearchUnit& u : m.units) {
    std::ostringstream s;
    std::map<int, std::pair<int, int>> made;  // tensor -> (position in unit, output)
    for (size_t pos = 0; pos < u.ops.size(); ++pos) {
      const SearchOp& op = m.ops[u.ops[pos]];
      const sema::OpNode& n = g.node(op.node);
      s << op.kind << "|" << n.anno.anno.to_string() << "|" << op.flops << "|" << op.inner_bytes << "|" << op.backward;
      for (const auto& [id, size] : n.anno.sizes) s << id << "=" << size << ",";
      for (size_t k = 0; k < op.in_tensor.size(); ++k) {
        int t = op.in_tensor[k];
        auto it = made.find(t);
        if (t < 0)
          s << ";-";
        else if (it != made.end())
          s << ";p" << it->second.first << "." << it->second.second;
        else
          s << ";x" << static_cast<int>(g.tensor(t).kind) << sema::shape_to_string(g.tensor(t).shape);
      }
      for (size_t k = 0; k < op.out_tensor.size(); ++k) {
        made[op.out_tensor[k]] = {static_cast<int>(pos), static_cast<int>(k)};
        bool outside = false;  // read by an op of another unit
        if (op.out_tensor[k] >= 0)
          for (const auto& [c, ck] : m.consumers[op.out_tensor[k]])
            outside = outside || m.unit_of_op[c] != m.unit_of_op[u.ops[pos]];
        s << ";o" << op.out_bytes[k] << (outside ? "x" : "");
      }
      s << "\n";
    }
    auto [it, fresh] = sigs.emplace(s.str(), static_cast<int>(sigs.size()));
    (void)fresh;
    u.signature = it->second;
  }
  m.signatures = static_cast<int>(sigs.size());
}

// Weights read by several units, and where each unit reads them.
void find_tied(SearchModel& m) {
  std::map<int, std::set<int>> units_of;
  for (size_t i = 0; i < m.ops.size(); ++i)
    for (size_t k = 0; k < m.ops[i].in_tensor.size(); ++k)
      if (m.ops[i].in_param[k] && m.ops[i].in_tensor[k] >= 0) units_of[m.ops[i].in_tensor[k]].insert(m.unit_of_op[i]);
  for (const auto& [t, us] : units_of)
    if (us.size() > 1) m.tied_units[t] = std::vector<int>(us.begin(), us.end());
  m.tied_reads.assign(m.units.size(), {});
  for (size_t u = 0; u < m.units.size(); ++u)
    for (size_t pos = 0; pos < m.units[u].ops.size(); ++pos) {
      const SearchOp& op = m.ops[m.units[u].ops[pos]];
      for (size_t k = 0; k < op.in_tensor.size(); ++k)
        if (op.in_param[k] && m.tied_units.count(op.in_tensor[k]))
          m.tied_reads[u].push_back({static_cast<int>(pos), static_cast<int>(k)});
    }
}

}  // namespace

SearchModel build_search_model(const sema::Graph& g, const sema::Plan& empty_plan) {
  SearchModel m;
  const sema::GradientFlow flow = sema::gradient_flow(g, empty_plan);
  m.op_of_node.assign(g.nodes().size(), -1);
  const std::vector<char> read_back = read_back_tensors(g);
  for (int node : g.top_level_nodes()) {
    if (g.node(node).phase != sema::Phase::Forward) continue;
    m.op_of_node[node] = static_cast<int>(m.ops.size());
    m.ops.push_back(read_op(g, flow, read_back, node));
  }
  for (int p : g.params()) m.param_bytes += g.tensor(p).bytes();
  link_tensors(g, m);
  m.graph_batch = find_graph_batch(g, m, m.graph_batch);
  make_units(m);
  find_tied(m);
  sign_units(g, m);
  m.megatron = find_megatron_structure(m);
  return m;
}

}  // namespace nns::planner
