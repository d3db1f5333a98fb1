#include "backend/lowering/adapters.h"
#include "semantics/check_deadline.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <queue>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace nns::backend {

namespace {

int64_t canonical_stride(const std::vector<LayoutFactor>& fs, size_t i) {
  int64_t w = 1;
  for (size_t j = i + 1; j < fs.size(); ++j)
    if (fs[j].kind == LayoutFactor::D && fs[j].dim == fs[i].dim) w *= fs[j].n;
  return w;
}

std::string factor_text(const LayoutFactor& f, bool with_stride) {
  switch (f.kind) {
    case LayoutFactor::R: return "R(" + std::to_string(f.n) + ")";
    case LayoutFactor::V: return "V(" + std::to_string(f.n) + ")";
    case LayoutFactor::D:
      return "D" + std::to_string(f.dim) + "(" + std::to_string(f.n) + ")" + (with_stride ? "s" + std::to_string(f.stride) : std::string());
  }
  return "?";
}

// Search key: strides always spelled out (two layouts differing only in
// which digit weighs more are different layouts).
std::string key(const std::vector<LayoutFactor>& fs) {
  std::string k;
  for (const LayoutFactor& f : fs) k += factor_text(f, true) + " ";
  return k;
}

// The same distinctions as key() (kind and size; dim and stride of a D
// digit), packed as raw bytes: the A* search names its states by it.
// Formatting key()'s text for every candidate move was most of a 1024-way
// search (V(256) R(4) -> R(1024): 50,000 expansions, 17 s).
std::string state_key(const std::vector<LayoutFactor>& fs) {
  std::string k;
  k.reserve(fs.size() * 21);
  auto put = [&k](int64_t v, size_t bytes) {
    char b[8];
    std::memcpy(b, &v, sizeof b);  // little-endian or not, one machine compares its own bytes
    k.append(b, bytes);
  };
  for (const LayoutFactor& f : fs) {
    k.push_back(static_cast<char>(f.kind));
    put(f.n, 8);
    if (f.kind != LayoutFactor::D) continue;
    put(f.dim, 4);
    put(f.stride, 8);
  }
  return k;
}

int64_t product(const std::vector<LayoutFactor>& fs) {
  int64_t p = 1;
  for (const LayoutFactor& f : fs) p *= f.n;
  return p;
}

int64_t split_of_dim(const std::vector<LayoutFactor>& fs, int dim) {
  int64_t p = 1;
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D && f.dim == dim) p *= f.n;
  return p;
}

int64_t pieces(const std::vector<LayoutFactor>& fs) {
  int64_t p = 1;
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D) p *= f.n;
  return p;
}

// Whether the D digits of every dim form a mixed-radix block index (each
// stride is the product of the sizes of the digits weighing less).
bool strides_valid(const std::vector<LayoutFactor>& fs) {
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> by_dim;  // dim -> (stride, n)
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D) by_dim[f.dim].push_back({f.stride, f.n});
  for (auto& [dim, digits] : by_dim) {
    std::sort(digits.begin(), digits.end());
    int64_t w = 1;
    for (auto& [stride, n] : digits) {
      if (stride != w) return false;
      w *= n;
    }
  }
  return true;
}

// Device groups that differ only in digit `acted` of the mixed-radix sequence.
// A group is the positions whose acted digit runs 0..n-1, the others
// fixed: a base position (acted digit 0) plus multiples of the digit's
// place value. Groups come in the order of their other digits, outermost
// first, which is the order of their base positions.
std::vector<std::vector<int>> groups_of(const std::vector<LayoutFactor>& fs, size_t acted, const std::vector<int>& devices) {
  int64_t place = 1;  // the acted digit's weight in a position
  for (size_t i = acted + 1; i < fs.size(); ++i) place *= fs[i].n;
  const int64_t n = fs[acted].n, count = static_cast<int64_t>(devices.size());
  std::vector<std::vector<int>> groups;
  groups.reserve(static_cast<size_t>(count / std::max<int64_t>(1, n)));
  for (int64_t base = 0; base < count; ++base) {
    if ((base / place) % n != 0) continue;
    std::vector<int> g(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) g[static_cast<size_t>(k)] = devices[static_cast<size_t>(base + k * place)];
    groups.push_back(std::move(g));
  }
  return groups;
}

struct Edge {
  std::vector<LayoutFactor> next;
  AdapterStep step;                 // groups filled in only for the chosen path
  std::vector<LayoutFactor> acted_on;  // the factors the step acts on, and which
  size_t acted = 0;
};

AdapterStep step_of(AdapterStep::Prim prim, int dim, int to_dim, double bytes) {
  AdapterStep st;
  st.prim = prim;
  st.dim = dim;
  st.to_dim = to_dim;
  st.bytes = bytes;
  return st;
}

// Scales the strides of dim `dim`'s digits other than `skip` (a new digit
// of weight 1 pushes them up, a gathered one lets them down).
void rescale(std::vector<LayoutFactor>& fs, int dim, size_t skip, int64_t mul, int64_t div) {
  for (size_t j = 0; j < fs.size(); ++j)
    if (j != skip && fs[j].kind == LayoutFactor::D && fs[j].dim == dim) fs[j].stride = fs[j].stride * mul / div;
}

// Every single-primitive move from `fs`: act on a whole factor or on the
// inner/outer part of one (a factor R(4) is also R(2)R(2), the same mapping).
// A D digit is gathered or exchanged only when it weighs 1 in its dim's
// block index (the group's blocks are then contiguous); a digit a reduction,
// a chunk or an exchange creates weighs 1 (it cuts each device's block).
std::vector<Edge> moves(const std::vector<LayoutFactor>& fs, const sema::Shape& shape, double full_bytes) {
  std::vector<Edge> out;
  double piece = full_bytes / static_cast<double>(pieces(fs));
  for (size_t i = 0; i < fs.size(); ++i) {
    const LayoutFactor f = fs[i];
    for (int64_t a = 2; a <= f.n; ++a) {
      if (f.n % a) continue;
      for (int side = 0; side < (a == f.n ? 1 : 2); ++side) {
        std::vector<LayoutFactor> ex(fs.begin(), fs.begin() + static_cast<long>(i));
        size_t acted;
        LayoutFactor inner = f, outer = f;
        if (a == f.n) {
          ex.push_back(f);
          acted = i;
        } else if (side == 0) {  // act on the inner part
          outer.n = f.n / a;
          outer.stride = f.stride * a;
          inner.n = a;
          ex.push_back(outer);
          ex.push_back(inner);
          acted = i + 1;
        } else {  // act on the outer part
          outer.n = a;
          outer.stride = f.stride * (f.n / a);
          inner.n = f.n / a;
          ex.push_back(outer);
          ex.push_back(inner);
          acted = i;
        }
        ex.insert(ex.end(), fs.begin() + static_cast<long>(i) + 1, fs.end());
        const int64_t acted_stride = ex[acted].stride;
        double n = static_cast<double>(a);
        // Device groups are computed for the chosen path only (search()):
        // building them for every candidate move dominated derivation time.
        auto emit = [&](std::vector<LayoutFactor> next, LayoutFactor replacement, AdapterStep step) {
          next[acted] = replacement;
          out.push_back({normalized_factors(next), step, ex, acted});
        };
        auto new_split = [&](int d, std::vector<LayoutFactor> base) {  // base with a weight-1 digit of dim d added at `acted`
          rescale(base, d, acted, a, 1);
          return base;
        };
        auto can_split = [&](int dim) { return shape[dim] % (split_of_dim(ex, dim) * a) == 0; };
        if (f.kind == LayoutFactor::V) {
          emit(ex, {LayoutFactor::R, -1, a, 0}, step_of(AdapterStep::AllReduce, -1, -1, 2 * (n - 1) / n * piece));
          for (int d = 0; d < static_cast<int>(shape.size()); ++d)
            if (can_split(d)) emit(new_split(d, ex), {LayoutFactor::D, d, a, 1}, step_of(AdapterStep::ReduceScatter, d, -1, (n - 1) / n * piece));
        } else if (f.kind == LayoutFactor::D) {
          if (acted_stride != 1) continue;
          std::vector<LayoutFactor> gathered = ex;
          rescale(gathered, f.dim, acted, 1, a);
          emit(gathered, {LayoutFactor::R, -1, a, 0}, step_of(AdapterStep::AllGather, f.dim, -1, (n - 1) / n * piece * n));
          for (int d = 0; d < static_cast<int>(shape.size()); ++d)
            if (d != f.dim && can_split(d))
              emit(new_split(d, gathered), {LayoutFactor::D, d, a, 1}, step_of(AdapterStep::AllToAll, f.dim, d, (n - 1) / n * piece));
        } else {
          for (int d = 0; d < static_cast<int>(shape.size()); ++d)
            if (can_split(d)) emit(new_split(d, ex), {LayoutFactor::D, d, a, 1}, step_of(AdapterStep::Chunk, d, -1, 0));
          emit(ex, {LayoutFactor::V, -1, a, 0}, step_of(AdapterStep::ValueSplit, -1, -1, 0));
        }
      }
    }
  }
  return out;
}

// The cheapest chain of moves from one factor list to another. It depends
// on the factors, the shape and the byte size only, not on which devices
// hold the pieces, so one search serves every edge with the same pair.
struct Chain {
  std::vector<std::pair<Edge, std::vector<LayoutFactor>>> moves;  // each move and the factors after it
  double cost = 0;
  std::string error;  // non-empty: no chain exists
};

// `bound`: chains costing more may be given up (an error is returned when
// none is left); the pruning keeps every state on a chain within it, so a
// chain found is still the cheapest.
Chain find_chain(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const sema::Shape& shape, double full_bytes,
                 bool exhaustive, double bound) {
  // One collective that does the whole change is taken at once when the
  // source has no replicated factor: each primitive's volume is what a
  // bandwidth-optimal algorithm moves for that change, so no chain beats it
  // (tests/plan/adapters_test.cpp checks this against the exhaustive search
  // over every layout pair of 4 and 8 devices). With replicas a chain can
  // win: chunk the replicas, reduce a smaller piece, gather back. Proving
  // the single collective optimal by search is what made a 1024-way V -> R
  // cost 50,000 expansions: the free moves open a vast space below its cost.
  const std::string start = state_key(from), goal = state_key(to);
  bool replicated = false;
  for (const LayoutFactor& f : from) replicated = replicated || (f.kind == LayoutFactor::R && f.n > 1);
  if (!exhaustive && !replicated) {
    Chain direct;
    bool found = false;
    for (Edge& e : moves(from, shape, full_bytes))
      if (state_key(e.next) == goal && (!found || e.step.bytes < direct.cost)) {
        found = true;
        direct.cost = e.step.bytes;
        direct.moves = {{e, e.next}};
      }
    if (found) return direct;
  }
  // A* with a lower bound on what is left to pay, from two facts of the
  // volume model. (1) Only an allgather makes a device's piece larger, and
  // it costs exactly the growth: reaching the target's piece G from a piece
  // q costs at least G - q. (2) Partial sums in excess of the target's (v
  // where it has g) need reductions whose factors multiply to at least v/g;
  // one of factor a moves at least (1 - 1/a) of the piece it reduces, and
  // sum(1 - 1/a_i) >= 1 - 1/prod(a_i), so reductions on pieces of at least
  // m cost at least (1 - g/v) m, and a piece of m < G must then grow by
  // G - m. Minimising over m gives the bound below. It never overestimates,
  // so the first chain to reach the goal is still the cheapest (states are
  // re-opened when a cheaper way to them turns up).
  const double goal_piece = full_bytes / static_cast<double>(pieces(to));
  auto value_parts = [](const std::vector<LayoutFactor>& fs) {
    int64_t v = 1;
    for (const LayoutFactor& f : fs)
      if (f.kind == LayoutFactor::V) v *= f.n;
    return v;
  };
  const int64_t goal_values = value_parts(to);
  auto lower_bound = [&](const std::vector<LayoutFactor>& fs) {
    if (exhaustive) return 0.0;  // plain Dijkstra, which tests compare against
    double q = full_bytes / static_cast<double>(pieces(fs));
    double grow = std::max(0.0, goal_piece - q);
    int64_t v = value_parts(fs);
    if (v <= goal_values) return grow;
    double r = static_cast<double>(goal_values) / static_cast<double>(v);
    return std::min((1 - r) * goal_piece + grow, goal_piece - r * std::min(q, goal_piece));
  };
  struct Item {
    double f;  // cost so far + lower bound of the rest
    double cost;
    int steps;
    int state;  // index into `st`
    bool operator>(const Item& o) const { return f != o.f ? f > o.f : steps > o.steps; }
  };
  // States by number: one hashed lookup per candidate move (never iterated,
  // so the expansion order, and the chain found, are those of the ordered
  // maps of text keys this replaced).
  struct State {
    std::vector<LayoutFactor> fs;
    double cost = 0;  // the cheapest known way here
    int steps = 0;
    int parent = -1;  // the state it came from, by `via`
    Edge via;
  };
  std::unordered_map<std::string, int> ids{{start, 0}};
  std::vector<State> st(1);
  st[0].fs = from;
  int goal_id = start == goal ? 0 : -1;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> open;
  open.push({lower_bound(from), 0, 0, 0});
  // No state whose bound exceeds the best chain to the goal found so far can
  // lead to a better one: without this, the free moves (chunk, value-split)
  // of a 1024-way layout open tens of thousands of states.
  auto beaten_by_goal = [&](double f, int steps) {
    if (goal_id < 0) return false;
    const State& g = st[static_cast<size_t>(goal_id)];
    double slack = 1e-9 * g.cost;  // bounds add fractions: no rounding may drop a tie
    return f > g.cost + slack || (f >= g.cost - slack && steps >= g.steps);
  };
  size_t expanded = 0;
  while (!open.empty()) {
    sema::CheckDeadline::poll();
    Item cur = open.top();
    open.pop();
    const State& here = st[static_cast<size_t>(cur.state)];
    if (cur.cost > here.cost || (cur.cost == here.cost && cur.steps > here.steps)) continue;
    if (cur.state == goal_id) break;
    if (++expanded > 50000) break;
    for (Edge& e : moves(here.fs, shape, full_bytes)) {
      std::string k = state_key(e.next);
      const bool at_goal = k == goal;
      double c = cur.cost + e.step.bytes;
      int steps = cur.steps + 1;
      double f = c + (at_goal ? 0.0 : lower_bound(e.next));
      if (!at_goal && beaten_by_goal(f, steps)) continue;
      if (f > bound + 1e-9 * bound) continue;
      auto [it, fresh] = ids.emplace(std::move(k), static_cast<int>(st.size()));
      if (fresh) {
        st.emplace_back();
        st.back().fs = e.next;
        if (at_goal) goal_id = it->second;
      } else {
        // Ties in volume go to the shorter chain (fewer collectives to launch).
        const State& seen = st[static_cast<size_t>(it->second)];
        if (seen.cost < c || (seen.cost == c && seen.steps <= steps)) continue;
      }
      State& s = st[static_cast<size_t>(it->second)];
      s.cost = c;
      s.steps = steps;
      s.parent = cur.state;
      s.via = std::move(e);
      open.push({f, c, steps, it->second});
    }
  }
  Chain chain;
  if (goal_id < 0) {
    chain.error = "no chain of collectives turns " + key(from) + "into " + key(to);
    if (bound < std::numeric_limits<double>::infinity()) chain.error += " within the cost given";
    return chain;
  }
  chain.cost = st[static_cast<size_t>(goal_id)].cost;
  for (int k = goal_id; k != 0; k = st[static_cast<size_t>(k)].parent)
    chain.moves.insert(chain.moves.begin(), {st[static_cast<size_t>(k)].via, st[static_cast<size_t>(k)].fs});
  return chain;
}

// find_chain, remembered across calls. The chain depends on the shape only
// through which splits divide it, and every cost scales with the tensor's
// bytes: the search runs on the divisibility profile (gcd of each dim with
// the device count) at one byte, so the layers of every stage share it.
// A search under a finite `bound` (chain units: per device, one byte) is
// not remembered (it lands in `scratch`): what later calls find must not
// depend on which bounded searches ran before.
const Chain& cached_chain(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const sema::Shape& shape,
                          bool exhaustive, double bound, Chain& scratch) {
  static std::mutex mu;
  static std::map<std::string, Chain> cache;
  int64_t n = product(from);
  sema::Shape profile;
  for (int64_t d : shape) profile.push_back(std::gcd(d, n));
  std::string k = key(from) + "|" + key(to) + "|" + sema::shape_to_string(profile) + (exhaustive ? "|x" : "");
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
  }
  if (bound < std::numeric_limits<double>::infinity()) {
    scratch = find_chain(from, to, profile, 1.0, exhaustive, bound);
    return scratch;
  }
  Chain c = find_chain(from, to, profile, 1.0, exhaustive, bound);
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(k, std::move(c)).first->second;  // std::map: references stay valid
}

Adapter search(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const std::vector<int>& devices,
               const sema::Shape& shape, double full_bytes, bool exhaustive, double give_up_above) {
  // The chain's costs are per device: every step's groups cover the whole
  // device list, so the total is the device count times as much.
  const double scale = full_bytes * static_cast<double>(devices.size());
  Chain scratch;
  const Chain& chain = cached_chain(from, to, shape, exhaustive, give_up_above / scale, scratch);
  if (!chain.error.empty()) throw std::invalid_argument(chain.error);
  Adapter a;
  for (const auto& [edge, after] : chain.moves) {
    AdapterStep step = edge.step;
    step.bytes *= scale;
    step.groups = groups_of(edge.acted_on, edge.acted, devices);
    step.after = Layout{devices, after};
    a.bytes += step.bytes;
    a.steps.push_back(step);
  }
  a.cost = a.bytes;
  return a;
}

}  // namespace

int64_t layout_pieces(const std::vector<LayoutFactor>& fs) { return pieces(fs); }
int64_t layout_split(const std::vector<LayoutFactor>& fs, int dim) { return split_of_dim(fs, dim); }

std::vector<LayoutFactor> normalized_factors(const std::vector<LayoutFactor>& in) {
  std::vector<LayoutFactor> fs;
  for (const LayoutFactor& f : in) {
    if (f.n == 1) continue;
    LayoutFactor g = f;
    if (g.kind != LayoutFactor::D) {
      g.dim = -1;
      g.stride = 0;
    }
    fs.push_back(g);
  }
  // Dims whose digits carry no stride get the canonical ones.
  std::set<int> unset;
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::D && f.stride == 0) unset.insert(f.dim);
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i].kind == LayoutFactor::D && unset.count(fs[i].dim)) fs[i].stride = canonical_stride(fs, i);
  std::vector<LayoutFactor> out;
  for (const LayoutFactor& f : fs) {
    if (!out.empty() && out.back().kind == f.kind && out.back().dim == f.dim &&
        (f.kind != LayoutFactor::D || out.back().stride == f.stride * f.n)) {
      out.back().n *= f.n;
      out.back().stride = f.stride;
    } else {
      out.push_back(f);
    }
  }
  return out;
}

Layout normalize(Layout l) {
  l.factors = normalized_factors(l.factors);
  return l;
}

std::string Layout::to_string() const {
  std::vector<LayoutFactor> fs = normalized_factors(factors);
  std::string s;
  // Strides are spelled out only where they differ from the canonical ones.
  for (size_t i = 0; i < fs.size(); ++i) s += factor_text(fs[i], fs[i].kind == LayoutFactor::D && fs[i].stride != canonical_stride(fs, i)) + " ";
  if (s.empty()) s = "R(1) ";
  s += "over [";
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + std::to_string(devices[i]);
  return s + "]";
}

const char* prim_name(AdapterStep::Prim p) {
  switch (p) {
    case AdapterStep::AllReduce: return "allreduce";
    case AdapterStep::AllGather: return "allgather";
    case AdapterStep::ReduceScatter: return "reduce-scatter";
    case AdapterStep::AllToAll: return "all-to-all";
    case AdapterStep::Chunk: return "chunk";
    case AdapterStep::ValueSplit: return "value-split";
    case AdapterStep::SendRecv: return "send/recv";
  }
  return "?";
}

std::string AdapterStep::to_string() const {
  std::string s = prim_name(prim);
  if (prim == AllToAll) s += " dim " + std::to_string(dim) + "->" + std::to_string(to_dim);
  else if (dim >= 0) s += " dim " + std::to_string(dim);
  s += prim == SendRecv ? " pairs " : " groups ";
  for (size_t g = 0; g < groups.size(); ++g) {
    s += g ? " " : "";
    s += "{";
    for (size_t i = 0; i < groups[g].size(); ++i) s += (i ? prim == SendRecv ? "->" : "," : "") + std::to_string(groups[g][i]);
    s += "}";
  }
  s += " bytes " + std::to_string(static_cast<int64_t>(bytes));
  if (prim == SendRecv && cross > 0) s += " (" + std::to_string(static_cast<int64_t>(cross)) + " across groups)";
  return s;
}

std::string Adapter::to_string() const {
  std::string s;
  for (const AdapterStep& st : steps) s += st.to_string() + "\n";
  return s;
}

void check_layout(const Layout& l, const sema::Shape& shape, const char* which) {
  if (l.devices.empty()) throw std::invalid_argument(std::string(which) + " layout has no devices");
  if (product(l.factors) != static_cast<int64_t>(l.devices.size()))
    throw std::invalid_argument(std::string(which) + " layout " + l.to_string() + ": factors do not multiply to the group size");
  for (const LayoutFactor& f : l.factors)
    if (f.kind == LayoutFactor::D && (f.dim < 0 || f.dim >= static_cast<int>(shape.size()) || shape[f.dim] % split_of_dim(l.factors, f.dim) != 0))
      throw std::invalid_argument(std::string(which) + " layout " + l.to_string() + ": a split does not divide the tensor");
  if (!strides_valid(l.factors)) throw std::invalid_argument(std::string(which) + " layout " + l.to_string() + ": strides do not form a block index");
}

bool in_group_cost(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const sema::Shape& shape, int64_t elem_bytes,
                   size_t devices, bool exhaustive, double& cost, int& steps, double give_up_above) {
  const double scale = static_cast<double>(sema::numel(shape) * elem_bytes) * static_cast<double>(devices);
  Chain scratch;
  const Chain& chain = cached_chain(normalized_factors(from), normalized_factors(to), shape, exhaustive, give_up_above / scale, scratch);
  if (!chain.error.empty()) return false;
  cost = chain.cost * scale;
  steps = static_cast<int>(chain.moves.size());
  return true;
}

Adapter derive_in_group(const Layout& from_in, const Layout& to_in, const sema::Shape& shape, int64_t elem_bytes, bool exhaustive,
                        const AdapterCost& cost) {
  Layout from = normalize(from_in), to = normalize(to_in);
  check_layout(from, shape, "source");
  check_layout(to, shape, "target");
  if (from.devices != to.devices) throw std::logic_error("internal: derive_in_group over two device lists");
  double full = static_cast<double>(sema::numel(shape) * elem_bytes);
  return search(from.factors, to.factors, from.devices, shape, full, exhaustive, cost.give_up_above);
}

std::vector<std::pair<std::vector<LayoutFactor>, double>> chain_costs_from(const std::vector<LayoutFactor>& from_in, const sema::Shape& shape,
                                                                         int64_t elem_bytes, int64_t devices) {
  std::vector<LayoutFactor> from = normalized_factors(from_in);
  const double scale = static_cast<double>(sema::numel(shape) * elem_bytes) * static_cast<double>(devices);
  std::map<std::string, double> best;
  std::map<std::string, std::vector<LayoutFactor>> states;
  using Item = std::pair<double, std::string>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> open;
  best[key(from)] = 0;
  states[key(from)] = from;
  open.push({0, key(from)});
  while (!open.empty()) {
    sema::CheckDeadline::poll();
    auto [c, k] = open.top();
    open.pop();
    if (c > best[k]) continue;
    for (Edge& e : moves(states[k], shape, 1.0)) {
      std::string nk = key(e.next);
      double nc = c + e.step.bytes;
      auto it = best.find(nk);
      if (it != best.end() && it->second <= nc) continue;
      best[nk] = nc;
      states[nk] = e.next;
      open.push({nc, nk});
    }
  }
  std::vector<std::pair<std::vector<LayoutFactor>, double>> out;
  for (auto& [k, c] : best) out.push_back({states[k], c * scale});
  return out;
}

std::string layout_key(const std::vector<LayoutFactor>& fs) { return key(normalized_factors(fs)); }

bool layout_strides_valid(const std::vector<LayoutFactor>& fs) { return strides_valid(fs); }

}  // namespace nns::backend
