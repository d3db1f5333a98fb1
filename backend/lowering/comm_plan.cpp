#include "backend/lowering/comm_plan.h"
#include "semantics/check_deadline.h"

#include <limits>
#include "backend/lowering/geometry.h"
#include "backend/lowering/parallel.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace nns::backend {

using sema::OperandSlice;

namespace {

bool same_ranges(const OperandSlice& a, const OperandSlice& b) { return a.start == b.start && a.length == b.length; }

// Merges two pieces one device holds into one, if they are adjacent along a
// dim (same values) or complementary partial sums of the same region.
bool merge(const OperandSlice& a, const OperandSlice& b, OperandSlice& out) {
  if (same_ranges(a, b) && a.value_parts == b.value_parts) {
    if (a.value_index == b.value_index) {
      out = a;  // the same piece twice
      return true;
    }
    // Values k and k+1 of n merge into k/2 of n/2 when k is even.
    int64_t lo = std::min(a.value_index, b.value_index), hi = std::max(a.value_index, b.value_index);
    if (hi == lo + 1 && lo % 2 == 0 && a.value_parts % 2 == 0) {
      out = a;
      out.value_index = lo / 2;
      out.value_parts = a.value_parts / 2;
      return true;
    }
    return false;
  }
  if (a.value_index != b.value_index || a.value_parts != b.value_parts || a.start.size() != b.start.size())
    return false;
  int diff = -1;
  for (size_t d = 0; d < a.start.size(); ++d) {
    if (a.start[d] == b.start[d] && a.length[d] == b.length[d]) continue;
    if (diff >= 0) return false;
    diff = static_cast<int>(d);
  }
  if (diff < 0) return false;
  const OperandSlice& first = a.start[diff] < b.start[diff] ? a : b;
  const OperandSlice& second = a.start[diff] < b.start[diff] ? b : a;
  if (first.start[diff] + first.length[diff] != second.start[diff] || first.length[diff] != second.length[diff])
    return false;
  out = first;
  out.length[diff] = first.length[diff] * 2;
  // Only aligned pairs keep a regular split (piece 2i with 2i+1).
  return (first.start[diff] / first.length[diff]) % 2 == 0;
}

std::vector<OperandSlice> merge_all(std::vector<OperandSlice> pieces) {
  bool changed = true;
  while (changed && pieces.size() > 1) {
    changed = false;
    for (size_t i = 0; i < pieces.size() && !changed; ++i)
      for (size_t j = i + 1; j < pieces.size() && !changed; ++j) {
        OperandSlice m;
        if (merge(pieces[i], pieces[j], m)) {
          pieces[i] = m;
          pieces.erase(pieces.begin() + static_cast<long>(j));
          changed = true;
        }
      }
  }
  return pieces;
}

}  // namespace

bool layout_of_pieces(const std::vector<std::pair<int, OperandSlice>>& pieces, const sema::Shape& shape, Layout& out,
                      std::string& why) {
  // One piece per device (several merged, nnScaler's coshard), by device.
  std::vector<std::pair<int, size_t>> by_device;
  by_device.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) by_device.push_back({pieces[i].first, i});
  std::sort(by_device.begin(), by_device.end());
  std::vector<int> devices;
  std::vector<const OperandSlice*> piece;
  std::vector<OperandSlice> merged_store;
  merged_store.reserve(by_device.size());
  for (size_t i = 0; i < by_device.size();) {
    size_t j = i;
    while (j < by_device.size() && by_device[j].first == by_device[i].first) ++j;
    int dev = by_device[i].first;
    if (j - i == 1) {
      piece.push_back(&pieces[by_device[i].second].second);
    } else {
      std::vector<OperandSlice> list;
      for (size_t k = i; k < j; ++k) list.push_back(pieces[by_device[k].second].second);
      std::vector<OperandSlice> merged = merge_all(list);
      if (merged.size() != 1) {
        why = "device " + std::to_string(dev) + " holds " + std::to_string(merged.size()) +
              " pieces that do not merge into one";
        return false;
      }
      merged_store.push_back(merged[0]);
      piece.push_back(&merged_store.back());
    }
    devices.push_back(dev);
    i = j;
  }
  const OperandSlice& p0 = *piece[0];
  const size_t rank = shape.size(), n = devices.size();
  std::vector<int64_t> split(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    if (p0.length[d] <= 0 || shape[d] % p0.length[d] != 0) {
      why = "pieces do not split dim " + std::to_string(d) + " evenly";
      return false;
    }
    split[d] = shape[d] / p0.length[d];
  }
  std::vector<int64_t> blocks(n * rank), labels(n);
  for (size_t i = 0; i < n; ++i) {
    const OperandSlice& s = *piece[i];
    if (s.length != p0.length || s.value_parts != p0.value_parts) {
      why = "devices hold pieces of different sizes";
      return false;
    }
    for (size_t d = 0; d < rank; ++d) {
      if (s.start[d] % s.length[d] != 0) {
        why = "a piece does not start on a block boundary";
        return false;
      }
      blocks[i * rank + d] = s.start[d] / s.length[d];
    }
    labels[i] = s.value_index;
  }
  // Every (block, partial sum) must be held by the same number of devices.
  std::vector<std::vector<int64_t>> keys(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i].assign(blocks.begin() + static_cast<long>(i * rank), blocks.begin() + static_cast<long>((i + 1) * rank));
    keys[i].push_back(labels[i]);
  }
  std::vector<size_t> by_key(n);
  for (size_t i = 0; i < n; ++i) by_key[i] = i;
  std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  std::vector<int64_t> replica(n, 0);
  int64_t r = -1, distinct = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && keys[by_key[j]] == keys[by_key[i]]) replica[by_key[j]] = static_cast<int64_t>(j - i), ++j;
    int64_t count = static_cast<int64_t>(j - i);
    if (r >= 0 && count != r) {
      why = "pieces are replicated unevenly";
      return false;
    }
    r = count;
    ++distinct;
    i = j;
  }
  int64_t expected = r * p0.value_parts;
  for (int64_t s : split) expected *= s;
  if (expected != static_cast<int64_t>(n) || distinct * r != expected) {
    why = "the pieces do not cover the tensor exactly once per replica";
    return false;
  }
  // Devices in ascending order, when a layout over that order names their
  // pieces (any D strides, any order of the factors).
  if (fit_blocks(devices, blocks, labels, p0.value_parts, shape, out)) return true;
  // Otherwise the order of the devices is chosen: by replica, partial sum,
  // then block index, outermost first, which is the layout R V D0 D1 ...
  std::vector<std::pair<std::vector<int64_t>, int>> keyed;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> k{replica[i], labels[i]};
    k.insert(k.end(), blocks.begin() + static_cast<long>(i * rank), blocks.begin() + static_cast<long>((i + 1) * rank));
    keyed.push_back({k, devices[i]});
  }
  std::sort(keyed.begin(), keyed.end());
  out.devices.clear();
  for (auto& [k, dev] : keyed) out.devices.push_back(dev);
  out.factors = {{LayoutFactor::R, -1, r, 0}, {LayoutFactor::V, -1, p0.value_parts, 0}};
  for (size_t d = 0; d < rank; ++d) out.factors.push_back({LayoutFactor::D, static_cast<int>(d), split[d], 0});
  out = normalize(out);
  if (out.factors.empty()) out.factors.push_back({LayoutFactor::R, -1, 1, 0});
  return true;
}

namespace {

// (device, slice of operand k) for every device of every leaf of `node`.
std::vector<std::pair<int, OperandSlice>> operand_pieces(const sema::Plan& plan, int node, size_t k,
                                                         std::vector<OperandSlice> sema::SubOp::*side) {
  std::vector<std::pair<int, OperandSlice>> out;
  for (int leaf : plan.leaves_of(node)) {
    const sema::SubOp& s = plan.subops[leaf];
    for (int d : s.devices) out.push_back({d, (s.*side)[k]});
  }
  return out;
}

}  // namespace

std::vector<std::pair<int, OperandSlice>> input_pieces(const sema::Plan& plan, int node, size_t k) {
  return operand_pieces(plan, node, k, &sema::SubOp::inputs);
}

std::vector<std::pair<int, OperandSlice>> output_pieces(const sema::Plan& plan, int node, size_t k) {
  return operand_pieces(plan, node, k, &sema::SubOp::outputs);
}

// The gradient a consumer produces for a parameter piece: distinct sub-ops
// sharing a piece (e.g. batch-split) produce partial sums; the same sub-op
// replicated on several devices produces the same values.
std::vector<std::pair<int, OperandSlice>> gradient_pieces(const sema::Plan& plan, int node, size_t k) {
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, std::vector<int>> sharing;  // piece -> leaves
  std::vector<int> leaves;
  for (int leaf : plan.leaves_of(node)) leaves.push_back(leaf);
  for (int leaf : leaves) {
    const OperandSlice& s = plan.subops[leaf].inputs[k];
    sharing[{s.start, s.length}].push_back(leaf);
  }
  std::vector<std::pair<int, OperandSlice>> out;
  for (auto& [key, group] : sharing)
    for (size_t i = 0; i < group.size(); ++i) {
      OperandSlice s = plan.subops[group[i]].inputs[k];
      s.value_parts = static_cast<int64_t>(group.size());
      s.value_index = static_cast<int64_t>(i);
      for (int d : plan.subops[group[i]].devices) out.push_back({d, s});
    }
  return out;
}

Layout gradient_layout(Layout l) {
  for (LayoutFactor& f : l.factors)
    if (f.kind == LayoutFactor::V) f.kind = LayoutFactor::R;
  return normalize(l);
}

namespace {

// One adapter search of derive_communication, run after the walk.
struct Search {
  Layout from, to;
  sema::Shape shape;
  int64_t elem_bytes;
};

// The searches, then each edge (edge_search: edge, search, in walk order)
// given its search's adapter, or its error as the edge's note.
// cost.give_up_above bounds the edges together: each search gets what the
// edges before it left, so under a bound they run in walk order (a search
// that failed is tried again by the next edge that needs it, under what is
// left then). (An adapter found within its bound is the cheapest; one
// found above it is only ever reused within this call, whose total is over
// the bound anyway.) Without a bound no search depends on another: they
// run on all cores (parallel.h).
void run_searches(const std::vector<Search>& searches, const std::vector<std::pair<size_t, size_t>>& edge_search,
                  const AdapterCost& cost, CommPlan& cp) {
  std::vector<Adapter> found(searches.size());
  std::vector<std::string> failed(searches.size());
  if (cost.give_up_above < std::numeric_limits<double>::infinity()) {
    double spent = 0;
    std::vector<char> done(searches.size(), 0);
    for (const auto& [edge, k] : edge_search) {
      const Search& q = searches[k];
      if (!done[k]) {
        try {
          AdapterCost left = cost;
          left.give_up_above = cost.give_up_above - spent;
          found[k] = derive_adapter(q.from, q.to, q.shape, q.elem_bytes, false, left);
          done[k] = 1;
        } catch (const std::invalid_argument& err) {
          cp.edges[edge].note = err.what();
          continue;
        }
      }
      spent += found[k].cost;
      cp.edges[edge].adapter = found[k];
    }
    return;
  }
  parallel_for(searches.size(), [&](size_t i) {
    sema::CheckDeadline::poll();
    const Search& q = searches[i];
    try {
      found[i] = derive_adapter(q.from, q.to, q.shape, q.elem_bytes, false, cost);
    } catch (const std::invalid_argument& err) {
      failed[i] = err.what();
    }
  });
  for (const auto& [edge, search] : edge_search) {
    if (failed[search].empty())
      cp.edges[edge].adapter = found[search];
    else
      cp.edges[edge].note = failed[search];
  }
}

}  // namespace

CommPlan derive_communication(const sema::Graph& g, const sema::Plan& plan, const std::vector<bool>* only_nodes,
                              const AdapterCost& cost) {
  CommPlan cp;
  auto wanted = [&](int producer, int consumer) {
    auto in_set = [&](int n) {
      return n >= 0 && static_cast<size_t>(n) < only_nodes->size() && (*only_nodes)[static_cast<size_t>(n)];
    };
    return !only_nodes || in_set(producer) || in_set(consumer);
  };
  // Layers repeat: the same (layout, layout, shape) pair is searched once.
  // Device lists are numbered once: keys spelling out 1024 devices made the
  // lookups themselves the cost of deriving a 1024-device plan.
  std::map<std::vector<int>, int> device_set_ids;
  auto layout_key = [&](const Layout& l) {
    int id = device_set_ids.emplace(l.devices, static_cast<int>(device_set_ids.size())).first->second;
    return Layout{{}, l.factors}.to_string() + "#" + std::to_string(id);  // to_string normalises the factors
  };
  auto search_key = [&](const Layout& from, const Layout& to, const sema::Shape& shape, int64_t elem_bytes) {
    return layout_key(from) + "|" + layout_key(to) + "|" + sema::shape_to_string(shape) + "|" +
           std::to_string(elem_bytes);
  };
  // The distinct searches are collected during the walk and run after it (run_searches).
  std::vector<Search> searches;
  std::map<std::string, size_t> search_of_key;
  std::vector<std::pair<size_t, size_t>> edge_search;  // (edge, search)
  auto adapter_of = [&](CommEdge& e, const sema::Shape& shape, int64_t elem_bytes) {
    auto [it, fresh] = search_of_key.emplace(search_key(e.from, e.to, shape, elem_bytes), searches.size());
    if (fresh) searches.push_back({e.from, e.to, shape, elem_bytes});
    edge_search.emplace_back(cp.edges.size(), it->second);  // e is pushed next
  };
  std::map<int, Layout> storage;  // params / inputs: the layout of their first consumer
  auto add_edge = [&](int tensor, int producer, int consumer, int input_index, bool backward,
                      const std::vector<std::pair<int, OperandSlice>>& from_pieces, const Layout* from_known,
                      const std::vector<std::pair<int, OperandSlice>>& to_pieces) {
    sema::CheckDeadline::poll();
    CommEdge e;
    e.tensor = tensor;
    e.producer = producer;
    e.consumer = consumer;
    e.input_index = input_index;
    e.backward = backward;
    const sema::TensorInfo& t = g.tensor(tensor);
    std::string why;
    bool ok = from_known ? (e.from = *from_known, true) : layout_of_pieces(from_pieces, t.shape, e.from, why);
    if (ok) ok = layout_of_pieces(to_pieces, t.shape, e.to, why);
    if (!ok)
      e.note = "irregular layout (" + why + "): needs piece-wise send/recv";
    else
      adapter_of(e, t.shape, sema::dtype_bytes(t.dtype));
    cp.edges.push_back(std::move(e));
  };
  for (size_t node = 0; node < plan.root_of_node.size(); ++node) {
    if (plan.root_of_node[node] < 0) continue;
    const sema::OpNode& n = g.node(static_cast<int>(node));
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int t = n.inputs[k];
      const sema::TensorInfo& info = g.tensor(t);
      if (info.kind != sema::TensorKind::Activation) {
        if (storage.count(t) && !wanted(-1, static_cast<int>(node))) continue;
        auto to = input_pieces(plan, static_cast<int>(node), k);
        Layout here;
        std::string why;
        if (!storage.count(t) && layout_of_pieces(to, info.shape, here, why)) {
          storage[t] = here;  // lives where its first consumer needs it: no traffic
          continue;
        }
        if (!wanted(-1, static_cast<int>(node))) continue;
        if (storage.count(t))
          add_edge(t, -1, static_cast<int>(node), static_cast<int>(k), false, {}, &storage[t], to);
        else
          add_edge(t, -1, static_cast<int>(node), static_cast<int>(k), false, to, nullptr, to);
        continue;
      }
      int producer = info.producer;
      if (!wanted(producer, static_cast<int>(node))) continue;
      auto to = input_pieces(plan, static_cast<int>(node), k);
      const sema::OpNode& p = g.node(producer);
      size_t o = static_cast<size_t>(std::find(p.outputs.begin(), p.outputs.end(), t) - p.outputs.begin());
      add_edge(t, producer, static_cast<int>(node), static_cast<int>(k), false, output_pieces(plan, producer, o),
               nullptr, to);
    }
  }
  // Backward: each consumer produces the gradient of its input in the layout
  // of its sub-ops (distinct sub-ops sharing a piece give partial sums); it
  // must reach the layout the producer's backward (or the parameter update)
  // reads it in.
  for (size_t node = 0; node < plan.root_of_node.size(); ++node) {
    if (plan.root_of_node[node] < 0) continue;
    const sema::OpNode& n = g.node(static_cast<int>(node));
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int t = n.inputs[k];
      const sema::TensorInfo& info = g.tensor(t);
      if (!sema::dtype_is_float(info.dtype) || info.kind == sema::TensorKind::Input) continue;
      if (!wanted(static_cast<int>(node), info.kind == sema::TensorKind::Param ? -1 : info.producer)) continue;
      CommEdge e;
      e.tensor = t;
      e.producer = static_cast<int>(node);  // the consumer in forward produces the gradient
      e.input_index = static_cast<int>(k);
      e.backward = true;
      std::string why;
      bool ok = true;
      if (info.kind == sema::TensorKind::Param) {
        if (!storage.count(t)) continue;
        e.to = storage[t];
      } else {
        const sema::OpNode& p = g.node(info.producer);
        e.consumer = info.producer;
        size_t o = static_cast<size_t>(std::find(p.outputs.begin(), p.outputs.end(), t) - p.outputs.begin());
        ok = layout_of_pieces(output_pieces(plan, info.producer, o), info.shape, e.to, why);
        // A producer that leaves partial sums reads the whole gradient on
        // every part (the dual of its forward allreduce is the identity).
        if (ok) e.to = gradient_layout(e.to);
      }
      if (ok) ok = layout_of_pieces(gradient_pieces(plan, static_cast<int>(node), k), info.shape, e.from, why);
      if (!ok)
        e.note = "irregular gradient layout (" + why + "): needs piece-wise send/recv";
      else
        adapter_of(e, info.shape, sema::dtype_bytes(info.dtype));
      cp.edges.push_back(std::move(e));
    }
  }
  run_searches(searches, edge_search, cost, cp);
  mark_shared_transfers(g, plan, cp);
  return cp;
}

void mark_shared_transfers(const sema::Graph& g, const sema::Plan& plan, CommPlan& cp) {
  auto segment = [&](int node) {
    return node >= 0 && static_cast<size_t>(node) < plan.segment_of_node.size()
               ? plan.segment_of_node[static_cast<size_t>(node)]
               : -1;
  };
  // Which forward consumers run a backward, and which tensors need a
  // gradient: only those gradient edges run (lowering's PlanAnalysis reads
  // the same flow).
  const sema::GradientFlow flow = sema::gradient_flow(g, plan);
  auto runs = [&](const CommEdge& e) {
    if (!e.backward) return true;
    const size_t n = static_cast<size_t>(e.producer), t = static_cast<size_t>(e.tensor);
    return n < flow.backward.size() && flow.backward[n] && t < flow.requires_grad.size() && flow.requires_grad[t];
  };
  // Edges that could share, by (direction, tensor, layouts, segment of the
  // consumer: backward, of the forward consumer that makes the share).
  std::map<std::tuple<bool, int, std::string, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < cp.edges.size(); ++i) {
    CommEdge& e = cp.edges[i];
    e.shared_with = -1;
    const bool param = g.tensor(e.tensor).kind == sema::TensorKind::Param;
    e.per_step = param;
    e.idle = !runs(e);
    if (!e.note.empty() || e.adapter.steps.empty() || bucketed(e) || e.idle) continue;
    const int consumer = e.backward ? e.producer : e.consumer;
    groups[{e.backward, e.tensor, e.from.to_string() + "|" + e.to.to_string(), segment(consumer)}].push_back(i);
  }
  for (auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    if (!std::get<0>(key)) {
      // Forward: the first consumer (graph order, then input order) is
      // emitted first; the others read what it received.
      for (size_t j = 1; j < members.size(); ++j) cp.edges[members[j]].shared_with = static_cast<int>(members[0]);
      continue;
    }
    const std::vector<size_t>& live = members;
    // Backward runs the ops in reverse graph order and an op's inputs in
    // order: the carrier is the last input of the first consumer (the edges
    // are listed by node, then input).
    size_t carrier = live[0];
    for (size_t i : live)
      if (cp.edges[i].producer == cp.edges[live[0]].producer) carrier = i;
    for (size_t i : live)
      if (i != carrier) cp.edges[i].shared_with = static_cast<int>(carrier);
  }
}

namespace {

bool launches(const AdapterStep& s) {
  return s.prim != AdapterStep::Chunk && s.prim != AdapterStep::ValueSplit &&
         (s.prim != AdapterStep::SendRecv || s.bytes > 0);
}

// Sums `f` over the edges that carry a transfer, per-micro-batch edges
// `micro_batches` times.
template <class F>
double sum_edges(const std::vector<CommEdge>& edges, int micro_batches, const F& f) {
  double v = 0;
  for (const CommEdge& e : edges)
    if (e.shared_with < 0 && !e.idle) v += f(e) * (e.per_step ? 1 : micro_batches);
  return v;
}

int64_t launches_of(const CommEdge& e) {
  int64_t n = 0;
  for (const AdapterStep& s : e.adapter.steps) n += launches(s) ? 1 : 0;
  return n;
}

}  // namespace

int64_t CommPlan::collectives() const {
  int64_t n = 0;
  for (const CommEdge& e : edges)
    if (e.shared_with < 0 && !e.idle) n += launches_of(e);
  return n;
}

double CommPlan::bytes() const {
  double b = 0;
  for (const CommEdge& e : edges)
    if (e.shared_with < 0 && !e.idle) b += e.adapter.bytes;
  return b;
}

double CommPlan::cross_bytes() const {
  double b = 0;
  for (const CommEdge& e : edges)
    if (e.shared_with < 0 && !e.idle) b += e.adapter.cross;
  return b;
}

int64_t CommPlan::step_collectives(int micro_batches) const {
  return static_cast<int64_t>(
      sum_edges(edges, micro_batches, [](const CommEdge& e) { return static_cast<double>(launches_of(e)); }));
}

double CommPlan::step_bytes(int micro_batches) const {
  return sum_edges(edges, micro_batches, [](const CommEdge& e) { return e.adapter.bytes; });
}

std::string CommPlan::dump(const sema::Graph& g, int micro_batches) const {
  std::ostringstream out;
  out << "communication {\n";
  // The edges that share each carrier's transfer (listed with it).
  std::map<size_t, std::vector<size_t>> sharers;
  for (size_t i = 0; i < edges.size(); ++i)
    if (edges[i].shared_with >= 0) sharers[static_cast<size_t>(edges[i].shared_with)].push_back(i);
  for (size_t i = 0; i < edges.size(); ++i) {
    const CommEdge& e = edges[i];
    if ((e.adapter.steps.empty() && e.note.empty()) || e.shared_with >= 0 || (e.idle && e.note.empty())) continue;
    const sema::TensorInfo& t = g.tensor(e.tensor);
    out << "  " << (e.backward ? "backward grad " : "forward ") << "%" << e.tensor
        << (t.kind == sema::TensorKind::Activation ? "" : "(" + t.name + ")") << " " << sema::dtype_name(t.dtype)
        << sema::shape_to_string(t.shape) << ": ";
    // Backward the sharers are more sources of the gradient, forward more
    // destinations of the tensor.
    auto name = [&](int node) { return g.node(node).name; };
    std::string src =
        e.producer >= 0 ? name(e.producer) : std::string(t.kind == sema::TensorKind::Param ? "param" : "input");
    std::string dst = e.consumer >= 0 ? name(e.consumer) : std::string("update of " + t.name);
    auto it = sharers.find(i);
    if (it != sharers.end())
      for (size_t j : it->second)
        (e.backward ? src : dst) += " + " + name(e.backward ? edges[j].producer : edges[j].consumer);
    out << src << " -> " << dst;
    if (it != sharers.end()) out << (e.backward ? " (gradient shares summed, one transfer)" : " (one transfer)");
    if (e.per_step) out << " (once per step)";
    out << "\n";
    if (!e.note.empty()) {
      out << "    " << e.note << "\n";
      continue;
    }
    out << "    " << e.from.to_string() << "  =>  " << e.to.to_string() << "\n";
    for (const AdapterStep& s : e.adapter.steps) out << "    " << s.to_string() << "\n";
  }
  out << "  total: " << collectives() << " collective(s) per step (forward and backward), "
      << static_cast<int64_t>(bytes()) << " bytes by the volume model";
  if (cross_bytes() > 0) out << ", " << static_cast<int64_t>(cross_bytes()) << " of them across device groups";
  out << "\n";
  if (micro_batches > 1) {
    double cross = sum_edges(edges, micro_batches, [](const CommEdge& e) { return e.adapter.cross; });
    out << "  per step of " << micro_batches << " micro-batches: " << step_collectives(micro_batches)
        << " collective(s), " << static_cast<int64_t>(step_bytes(micro_batches)) << " bytes";
    if (cross > 0) out << ", " << static_cast<int64_t>(cross) << " of them across device groups";
    out << " (edges once per step counted once, the others per micro-batch)\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace nns::backend
