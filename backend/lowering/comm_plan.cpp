#include "backend/lowering/comm_plan.h"
#include "backend/lowering/comm_pieces.h"
#include "semantics/check_deadline.h"
#include "semantics/op_registry.h"

#include <limits>
#include "backend/lowering/geometry.h"
#include "backend/lowering/parallel.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

namespace nns::backend {

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

// Numbers layouts by their device list and normalised factors, which is
// what Layout::to_string spells out: equal ids, equal text. Keys spelling
// out 1024 devices (a text, or a device list in an ordered map, per edge)
// made the lookups themselves a cost of deriving a 1024-device plan.
class LayoutIds {
 public:
  int operator()(const Layout& l) {
    std::vector<LayoutFactor> fs = normalized_factors(l.factors);
    uint64_t h = l.devices.size();
    auto mix = [&h](uint64_t v) { h = (h + v) * 0x9e3779b97f4a7c15ull; };
    for (int d : l.devices) mix(static_cast<uint64_t>(d));
    for (const LayoutFactor& f : fs) {
      mix(static_cast<uint64_t>(f.kind));
      mix(static_cast<uint64_t>(f.dim));
      mix(static_cast<uint64_t>(f.n));
      mix(static_cast<uint64_t>(f.stride));
    }
    std::vector<int>& ids = by_hash_[h ^ (h >> 29)];
    for (int id : ids) {
      const Layout& seen = layouts_[static_cast<size_t>(id)];
      if (seen.devices == l.devices && seen.factors == fs) return id;
    }
    ids.push_back(static_cast<int>(layouts_.size()));
    layouts_.push_back({l.devices, std::move(fs)});
    return ids.back();
  }

 private:
  std::unordered_map<uint64_t, std::vector<int>> by_hash_;
  std::vector<Layout> layouts_;
};

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
  LayoutIds layout_id;
  // The distinct searches are collected during the walk and run after it (run_searches).
  std::vector<Search> searches;
  std::map<std::tuple<int, int, sema::Shape, int64_t>, size_t> search_of_key;
  std::vector<std::pair<size_t, size_t>> edge_search;  // (edge, search)
  auto adapter_of = [&](CommEdge& e, const sema::Shape& shape, int64_t elem_bytes) {
    auto [it, fresh] =
        search_of_key.emplace(std::make_tuple(layout_id(e.from), layout_id(e.to), shape, elem_bytes), searches.size());
    if (fresh) searches.push_back({e.from, e.to, shape, elem_bytes});
    edge_search.emplace_back(cp.edges.size(), it->second);  // e is pushed next
  };
  // Every operand's layout is read once (comm_pieces.h).
  OperandLayouts layouts(g, plan);
  // A whole plan reads every operand: on all cores, before the walk.
  if (!only_nodes) {
    auto kept = std::make_shared<OperandReads>();
    layouts.read_all(true, kept.get());
    cp.reads = std::move(kept);
  }
  std::map<int, Layout> storage;  // params / inputs: the layout of their first consumer
  // `to` by value: a read taken from `layouts` moves into the edge.
  auto add_edge = [&](int tensor, int producer, int consumer, int input_index, bool backward, const LayoutRead& from,
                      LayoutRead to, const char* irregular) {
    sema::CheckDeadline::poll();
    CommEdge e;
    e.tensor = tensor;
    e.producer = producer;
    e.consumer = consumer;
    e.input_index = input_index;
    e.backward = backward;
    const sema::TensorInfo& t = g.tensor(tensor);
    if (!from.ok || !to.ok) {
      e.note = std::string(irregular) + " (" + (from.ok ? to.why : from.why) + "): needs piece-wise send/recv";
    } else {
      e.from = from.layout;
      e.to = std::move(to.layout);
      adapter_of(e, t.shape, sema::dtype_bytes(t.dtype));
    }
    cp.edges.push_back(std::move(e));
  };
  // At most an edge per input forward and one backward: reserved, so that
  // no edge moves while the list grows.
  size_t inputs = 0;
  for (size_t node = 0; node < plan.root_of_node.size(); ++node)
    if (plan.root_of_node[node] >= 0) inputs += g.node(static_cast<int>(node)).inputs.size();
  cp.edges.reserve(2 * inputs);
  for (size_t node = 0; node < plan.root_of_node.size(); ++node) {
    if (plan.root_of_node[node] < 0) continue;
    const int nd = static_cast<int>(node);
    const sema::OpNode& n = g.node(nd);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int t = n.inputs[k];
      const sema::TensorInfo& info = g.tensor(t);
      const int ki = static_cast<int>(k);
      if (info.kind != sema::TensorKind::Activation) {
        const bool stored = storage.count(t) > 0;
        if (stored && !wanted(-1, nd)) continue;
        LayoutRead to = layouts.input(nd, k);
        if (!stored && to.ok) {
          storage[t] = to.layout;  // lives where its first consumer needs it: no traffic
          continue;
        }
        if (!wanted(-1, nd)) continue;
        LayoutRead from;
        if (stored) from = {true, storage[t], {}};
        add_edge(t, -1, nd, ki, false, stored ? from : to, to, "irregular layout");
        continue;
      }
      int producer = info.producer;
      if (!wanted(producer, nd)) continue;
      const sema::OpNode& p = g.node(producer);
      size_t o = static_cast<size_t>(std::find(p.outputs.begin(), p.outputs.end(), t) - p.outputs.begin());
      const LayoutRead& from = layouts.output(producer, o);
      add_edge(t, producer, nd, ki, false, from, from.ok ? layouts.input(nd, k) : LayoutRead{}, "irregular layout");
    }
  }
  // Backward: each consumer produces the gradient of its input in the layout
  // of its sub-ops (distinct sub-ops sharing a piece give partial sums); it
  // must reach the layout the producer's backward (or the parameter update)
  // reads it in.
  for (size_t node = 0; node < plan.root_of_node.size(); ++node) {
    if (plan.root_of_node[node] < 0) continue;
    const int nd = static_cast<int>(node);
    const sema::OpNode& n = g.node(nd);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int t = n.inputs[k];
      const sema::TensorInfo& info = g.tensor(t);
      if (!sema::dtype_is_float(info.dtype) || info.kind == sema::TensorKind::Input) continue;
      const bool param = info.kind == sema::TensorKind::Param;
      if (!wanted(nd, param ? -1 : info.producer)) continue;
      if (param && !storage.count(t)) continue;
      // The forward consumer produces the gradient; it goes to the forward
      // producer's backward, or to the parameter's update.
      LayoutRead to;
      int consumer = -1;
      if (param) {
        to = {true, storage[t], {}};
      } else {
        const sema::OpNode& p = g.node(info.producer);
        consumer = info.producer;
        size_t o = static_cast<size_t>(std::find(p.outputs.begin(), p.outputs.end(), t) - p.outputs.begin());
        to = layouts.output(info.producer, o);
        // A producer that leaves partial sums reads the whole gradient on
        // every part (the dual of its forward allreduce is the identity).
        if (to.ok) to.layout = gradient_layout(to.layout);
      }
      LayoutRead from = to.ok ? layouts.gradient(nd, k) : LayoutRead{};
      // (add_edge names the reason of whichever side failed: the target's first.)
      add_edge(t, nd, consumer, static_cast<int>(k), true, to.ok ? from : to, to, "irregular gradient layout");
    }
  }
  run_searches(searches, edge_search, cost, cp);
  mark_shared_transfers(g, plan, cp);
  return cp;
}

bool regatherable(const sema::Graph& g, const CommEdge& e) {
  if (e.backward || e.per_step || e.consumer < 0 || e.input_index < 0 ||
      g.tensor(e.tensor).kind == sema::TensorKind::Param)
    return false;
  bool gathers = false;
  for (const AdapterStep& st : e.adapter.steps) {
    if (st.prim != AdapterStep::AllGather && st.prim != AdapterStep::Chunk) return false;
    gathers = gathers || st.prim == AdapterStep::AllGather;
  }
  return gathers && sema::backward_reads_operand(g.node(e.consumer), static_cast<size_t>(e.input_index));
}

std::vector<size_t> idle_regathers(const sema::Graph& g, const sema::Plan& plan, const CommPlan& cp) {
  std::vector<char> gathered(g.nodes().size(), 0);  // node -> a regatherable input
  for (const CommEdge& e : cp.edges)
    if (static_cast<size_t>(e.consumer) < gathered.size() && regatherable(g, e))
      gathered[static_cast<size_t>(e.consumer)] = 1;
  std::vector<size_t> idle;
  for (size_t c = 0; c < plan.regather_calls.size(); ++c) {
    bool any = false;
    for (int n : plan.regather_calls[c].nodes)
      any = any || (n >= 0 && static_cast<size_t>(n) < gathered.size() && gathered[n]);
    if (!any) idle.push_back(c);
  }
  return idle;
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
  LayoutIds layout_id;
  std::map<std::tuple<bool, int, int, int, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < cp.edges.size(); ++i) {
    CommEdge& e = cp.edges[i];
    e.shared_with = -1;
    const bool param = g.tensor(e.tensor).kind == sema::TensorKind::Param;
    e.per_step = param;
    e.idle = !runs(e);
    if (!e.note.empty() || e.adapter.steps.empty() || bucketed(e) || e.idle) continue;
    const int consumer = e.backward ? e.producer : e.consumer;
    groups[{e.backward, e.tensor, layout_id(e.from), layout_id(e.to), segment(consumer)}].push_back(i);
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
