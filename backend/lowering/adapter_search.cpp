#include "backend/lowering/adapter_search.h"

#include <algorithm>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <queue>

#include "semantics/check_deadline.h"

namespace nns::backend {

namespace {

// Scales the strides of dim `dim`'s digits other than `skip` (a new digit
// of weight 1 pushes them up, a gathered one lets them down).
void rescale(std::vector<LayoutFactor>& fs, int dim, size_t skip, int64_t mul, int64_t div) {
  for (size_t j = 0; j < fs.size(); ++j)
    if (j != skip && fs[j].kind == LayoutFactor::D && fs[j].dim == dim) fs[j].stride = fs[j].stride * mul / div;
}

// A move as for_each_move shows it: views of scratch buffers, valid during
// the visit only.
struct MoveView {
  const std::vector<LayoutFactor>& next;  // normalised
  AdapterStep::Prim prim;
  int dim, to_dim;
  double bytes;
  const std::vector<LayoutFactor>& acted_on;
  size_t acted;
};

// Buffers for_each_move reuses from move to move.
struct MoveScratch {
  std::vector<LayoutFactor> ex, gathered, split, next, tmp, norm;
  std::vector<int> dims;
};

// Every single-primitive move from `fs`: act on a whole factor or on the
// inner/outer part of one (a factor R(4) is also R(2)R(2), the same mapping).
// A D digit is gathered or exchanged only when it weighs 1 in its dim's
// block index (the group's blocks are then contiguous); a digit a reduction,
// a chunk or an exchange creates weighs 1 (it cuts each device's block).
// Each is shown to `visit` in turn, built in `sc` without allocating: a
// search looks at millions and keeps few.
template <class Visit>
void for_each_move(const std::vector<LayoutFactor>& fs, const sema::Shape& shape, double full_bytes, MoveScratch& sc,
                   Visit&& visit) {
  const double piece = full_bytes / static_cast<double>(layout_pieces(fs));
  for (size_t i = 0; i < fs.size(); ++i) {
    const LayoutFactor f = fs[i];
    for (int64_t a = 2; a <= f.n; ++a) {
      if (f.n % a) continue;
      for (int side = 0; side < (a == f.n ? 1 : 2); ++side) {
        std::vector<LayoutFactor>& ex = sc.ex;
        ex.assign(fs.begin(), fs.begin() + static_cast<long>(i));
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
        const double n = static_cast<double>(a);
        // Device groups are computed for the chosen path only (search()):
        // building them for every candidate move dominated derivation time.
        auto emit = [&](const std::vector<LayoutFactor>& next, LayoutFactor replacement, AdapterStep::Prim prim,
                        int dim, int to_dim, double bytes) {
          sc.next = next;
          sc.next[acted] = replacement;
          normalize_factors_into(sc.next, sc.tmp, sc.dims, sc.norm);
          visit(MoveView{sc.norm, prim, dim, to_dim, bytes, ex, acted});
        };
        // `base` with a weight-1 digit of dim d added at `acted`.
        auto new_split = [&](int d, const std::vector<LayoutFactor>& base) -> const std::vector<LayoutFactor>& {
          sc.split = base;
          rescale(sc.split, d, acted, a, 1);
          return sc.split;
        };
        auto can_split = [&](int dim) { return shape[dim] % (layout_split(ex, dim) * a) == 0; };
        const int rank = static_cast<int>(shape.size());
        if (f.kind == LayoutFactor::V) {
          emit(ex, {LayoutFactor::R, -1, a, 0}, AdapterStep::AllReduce, -1, -1, 2 * (n - 1) / n * piece);
          for (int d = 0; d < rank; ++d)
            if (can_split(d))
              emit(new_split(d, ex), {LayoutFactor::D, d, a, 1}, AdapterStep::ReduceScatter, d, -1,
                   (n - 1) / n * piece);
        } else if (f.kind == LayoutFactor::D) {
          if (acted_stride != 1) continue;
          sc.gathered = ex;
          rescale(sc.gathered, f.dim, acted, 1, a);
          emit(sc.gathered, {LayoutFactor::R, -1, a, 0}, AdapterStep::AllGather, f.dim, -1, (n - 1) / n * piece * n);
          for (int d = 0; d < rank; ++d)
            if (d != f.dim && can_split(d))
              emit(new_split(d, sc.gathered), {LayoutFactor::D, d, a, 1}, AdapterStep::AllToAll, f.dim, d,
                   (n - 1) / n * piece);
        } else {
          for (int d = 0; d < rank; ++d)
            if (can_split(d)) emit(new_split(d, ex), {LayoutFactor::D, d, a, 1}, AdapterStep::Chunk, d, -1, 0);
          emit(ex, {LayoutFactor::V, -1, a, 0}, AdapterStep::ValueSplit, -1, -1, 0);
        }
      }
    }
  }
}

ChainMove materialize(const MoveView& m) {
  ChainMove c;
  c.next = m.next;
  c.step.prim = m.prim;
  c.step.dim = m.dim;
  c.step.to_dim = m.to_dim;
  c.step.bytes = m.bytes;
  c.acted_on = m.acted_on;
  c.acted = m.acted;
  return c;
}

// The move of `fs` that for_each_move shows `index`-th.
ChainMove move_at(const std::vector<LayoutFactor>& fs, const sema::Shape& shape, double full_bytes, size_t index) {
  MoveScratch sc;
  ChainMove out;
  size_t seen = 0;
  for_each_move(fs, shape, full_bytes, sc, [&](const MoveView& m) {
    if (seen++ == index) out = materialize(m);
  });
  return out;
}

// Whether two normalised factor lists name the same state: kind and size
// of each factor, dim and stride of a D digit.
bool same_state(const std::vector<LayoutFactor>& a, const std::vector<LayoutFactor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].n != b[i].n) return false;
    if (a[i].kind == LayoutFactor::D && (a[i].dim != b[i].dim || a[i].stride != b[i].stride)) return false;
  }
  return true;
}

int64_t value_parts(const std::vector<LayoutFactor>& fs) {
  int64_t v = 1;
  for (const LayoutFactor& f : fs)
    if (f.kind == LayoutFactor::V) v *= f.n;
  return v;
}

// One collective that does the whole change, when the source has no
// replicated factor (find_chain says why that is the cheapest); false when
// none does or there are replicas.
bool direct_move(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const sema::Shape& shape,
                 double full_bytes, Chain& direct) {
  for (const LayoutFactor& f : from)
    if (f.kind == LayoutFactor::R && f.n > 1) return false;
  bool found = false;
  for (ChainMove& e : chain_moves(from, shape, full_bytes))
    if (same_state(e.next, to) && (!found || e.step.bytes < direct.cost)) {
      found = true;
      direct.cost = e.step.bytes;
      direct.moves = {{e, e.next}};
    }
  return found;
}

uint64_t state_hash(const std::vector<LayoutFactor>& fs) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  };
  for (const LayoutFactor& f : fs) {
    mix(static_cast<uint64_t>(f.kind));
    mix(static_cast<uint64_t>(f.n));
    if (f.kind != LayoutFactor::D) continue;
    mix(static_cast<uint64_t>(static_cast<int64_t>(f.dim)));
    mix(static_cast<uint64_t>(f.stride));
  }
  return h;
}

// The search's states by number, found by their factors (open addressing
// on a 64-bit hash, equality checked on the factors). A lookup per
// candidate move, never iterated: which states exist, not where they lie,
// decides the search. Hashing the packed text keys of the states was most
// of a 1024-way search.
class StateTable {
 public:
  // The state named by `fs`, or -1.
  int find(const std::vector<LayoutFactor>& fs, uint64_t h,
           const std::vector<std::vector<LayoutFactor>*>& states) const {
    if (slots_.empty()) return -1;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const int id = slots_[i];
      if (id < 0) return -1;
      if (hashes_[static_cast<size_t>(id)] == h && same_state(*states[static_cast<size_t>(id)], fs)) return id;
    }
  }
  // Records state `id` (not present yet) with hash h.
  void add(int id, uint64_t h) {
    if (hashes_.size() <= static_cast<size_t>(id)) hashes_.resize(static_cast<size_t>(id) + 1);
    hashes_[static_cast<size_t>(id)] = h;
    if (2 * (count_ + 1) > slots_.size()) grow();
    place(id);
    ++count_;
  }

 private:
  void place(int id) {
    size_t i = hashes_[static_cast<size_t>(id)] & mask_;
    while (slots_[i] >= 0) i = (i + 1) & mask_;
    slots_[i] = id;
  }
  void grow() {
    std::vector<int> old = std::move(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, -1);
    mask_ = slots_.size() - 1;
    for (int id : old)
      if (id >= 0) place(id);
  }
  std::vector<int> slots_;
  std::vector<uint64_t> hashes_;
  size_t mask_ = 0, count_ = 0;
};

// A lower bound on what is left to pay, exact in an abstraction of the
// search: a state read as (P, v), its number of blocks and of partial sums
// (its replicas r = n / (P v) follow). Every move is a move there at the
// same cost — an allreduce of a ways (a | v) to (P, v/a) for 2(a-1)/a of a
// piece, a reduce-scatter to (P a, v/a) for (a-1)/a of it, an allgather
// (a | P) to (P/a, v) for (a-1) pieces, a chunk or a value split (a | r) to
// (P a, v) or (P, v a) for nothing, an all-to-all to itself — with fewer
// conditions (any a dividing the product, no strides, no shape), so the
// cheapest way to the goal there never costs more than the cheapest real
// chain. What the earlier bound missed, and why replicated partial sums
// searched past 50,000 states: a replica set chunked for free limits how
// small the pieces a reduction then moves can be (V(256) R(4) -> R(1024):
// the chunk, allreduce, allgather chain costs 1.248 pieces, the bound said
// 0.996). At most d(n)^2 states (66 at 1024 devices), solved once per search.
class AbstractBound {
 public:
  AbstractBound(int64_t n, int64_t goal_pieces, int64_t goal_values, double full_bytes) {
    for (int64_t d = 1; d <= n; ++d)
      if (n % d == 0) div_.push_back(d);
    const size_t k = div_.size();
    dist_.assign(k * k, std::numeric_limits<double>::infinity());
    // Reverse edges: into[w] holds (u, cost) for each move u -> w.
    std::vector<std::vector<std::pair<size_t, double>>> into(k * k);
    for (size_t pi = 0; pi < k; ++pi)
      for (size_t vi = 0; vi < k; ++vi) {
        const int64_t P = div_[pi], v = div_[vi];
        if (n % (P * v) != 0) continue;
        const int64_t r = n / (P * v);
        const double piece = full_bytes / static_cast<double>(P);
        const size_t u = pi * k + vi;
        auto edge = [&](int64_t P2, int64_t v2, double cost) { into[at(P2, v2)].push_back({u, cost}); };
        for (size_t ai = 1; ai < k; ++ai) {
          const int64_t a = div_[ai];
          const double na = static_cast<double>(a);
          if (v % a == 0) {
            edge(P, v / a, 2 * (na - 1) / na * piece);
            edge(P * a, v / a, (na - 1) / na * piece);
          }
          if (P % a == 0) edge(P / a, v, (na - 1) / na * piece * na);
          if (r % a == 0) {
            edge(P * a, v, 0);
            edge(P, v * a, 0);
          }
        }
      }
    using Item = std::pair<double, size_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> open;
    const size_t goal = at(goal_pieces, goal_values);
    if (goal == npos) return;  // not a layout of n devices: no state reaches it
    dist_[goal] = 0;
    open.push({0, goal});
    while (!open.empty()) {
      auto [c, w] = open.top();
      open.pop();
      if (c > dist_[w]) continue;
      for (auto [u, cost] : into[w])
        if (c + cost < dist_[u]) open.push({dist_[u] = c + cost, u});
    }
  }
  // The bound for a state of P blocks and v partial sums.
  double operator()(int64_t P, int64_t v) const {
    const size_t i = at(P, v);
    return i == npos ? 0.0 : dist_[i];
  }

 private:
  static constexpr size_t npos = static_cast<size_t>(-1);
  size_t at(int64_t P, int64_t v) const {
    auto pi = std::lower_bound(div_.begin(), div_.end(), P), vi = std::lower_bound(div_.begin(), div_.end(), v);
    if (pi == div_.end() || *pi != P || vi == div_.end() || *vi != v) return npos;
    return static_cast<size_t>(pi - div_.begin()) * div_.size() + static_cast<size_t>(vi - div_.begin());
  }
  std::vector<int64_t> div_;
  std::vector<double> dist_;  // by (P, v): the cheapest way to the goal in the abstraction
};

// `bound`: chains costing more may be given up (an error is returned when
// none is left); the pruning keeps every state on a chain within it, so a
// chain found is still the cheapest.
Chain find_chain(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to, const sema::Shape& shape,
                 double full_bytes, bool exhaustive, double bound) {
  // One collective that does the whole change is taken at once when the
  // source has no replicated factor: each primitive's volume is what a
  // bandwidth-optimal algorithm moves for that change, so no chain beats it
  // (tests/plan/adapters_test.cpp checks this against the exhaustive search
  // over every layout pair of 4 and 8 devices). With replicas a chain can
  // win: chunk the replicas, reduce a smaller piece, gather back. Proving
  // the single collective optimal by search is what made a 1024-way V -> R
  // cost 50,000 expansions: the free moves open a vast space below its cost.
  {
    Chain direct;
    if (!exhaustive && direct_move(from, to, shape, full_bytes, direct)) return direct;
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
  const double goal_piece = full_bytes / static_cast<double>(layout_pieces(to));
  const int64_t goal_values = value_parts(to);
  int64_t devices = 1;
  for (const LayoutFactor& f : from) devices *= f.n;
  const AbstractBound abstract(devices, layout_pieces(to), goal_values, full_bytes);
  auto lower_bound = [&](const std::vector<LayoutFactor>& fs) {
    if (exhaustive) return 0.0;  // plain Dijkstra, which tests compare against
    const int64_t pieces = layout_pieces(fs), v = value_parts(fs);
    double q = full_bytes / static_cast<double>(pieces);
    double grow = std::max(0.0, goal_piece - q);
    double old = grow;
    if (v > goal_values) {
      double r = static_cast<double>(goal_values) / static_cast<double>(v);
      old = std::min((1 - r) * goal_piece + grow, goal_piece - r * std::min(q, goal_piece));
    }
    return std::max(old, abstract(pieces, v));
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
  // maps of text keys this replaced). A state names the move that reached
  // it by its place among its parent's moves; only the chain found is
  // built (move_at).
  struct State {
    double cost = 0;  // the cheapest known way here
    int steps = 0;
    int parent = -1;  // the state it came from, by its move number `via`
    size_t via = 0;
  };
  std::vector<State> st(1);
  // Each state's factors, in an allocation of their own that stays put
  // while the list grows (the table reads them through these pointers).
  std::vector<std::unique_ptr<std::vector<LayoutFactor>>> factors;
  std::vector<std::vector<LayoutFactor>*> factor_of;
  StateTable ids;
  auto add_state = [&](const std::vector<LayoutFactor>& fs, uint64_t h) {
    const int id = static_cast<int>(factor_of.size());
    factors.push_back(std::make_unique<std::vector<LayoutFactor>>(fs));
    factor_of.push_back(factors.back().get());
    ids.add(id, h);
    return id;
  };
  add_state(from, state_hash(from));
  int goal_id = same_state(from, to) ? 0 : -1;
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
  MoveScratch sc;
  std::vector<LayoutFactor> here;  // the expanded state's factors (`st` grows while its moves are read)
  size_t expanded = 0;
  while (!open.empty()) {
    sema::CheckDeadline::poll();
    Item cur = open.top();
    open.pop();
    {
      const State& s = st[static_cast<size_t>(cur.state)];
      if (cur.cost > s.cost || (cur.cost == s.cost && cur.steps > s.steps)) continue;
    }
    if (cur.state == goal_id) break;
    if (++expanded > 50000) break;
    here = *factor_of[static_cast<size_t>(cur.state)];
    size_t index = 0;
    for_each_move(here, shape, full_bytes, sc, [&](const MoveView& m) {
      const size_t via = index++;
      const bool at_goal = same_state(m.next, to);
      double c = cur.cost + m.bytes;
      int steps = cur.steps + 1;
      double f = c + (at_goal ? 0.0 : lower_bound(m.next));
      if (!at_goal && beaten_by_goal(f, steps)) return;
      if (f > bound + 1e-9 * bound) return;
      const uint64_t h = state_hash(m.next);
      int id = ids.find(m.next, h, factor_of);
      if (id < 0) {
        id = add_state(m.next, h);
        st.emplace_back();
        if (at_goal) goal_id = id;
      } else {
        // Ties in volume go to the shorter chain (fewer collectives to launch).
        const State& seen = st[static_cast<size_t>(id)];
        if (seen.cost < c || (seen.cost == c && seen.steps <= steps)) return;
      }
      State& s = st[static_cast<size_t>(id)];
      s.cost = c;
      s.steps = steps;
      s.parent = cur.state;
      s.via = via;
      open.push({f, c, steps, id});
    });
  }
  Chain chain;
  if (goal_id < 0) {
    chain.error = "no chain of collectives turns " + factors_key(from) + "into " + factors_key(to);
    if (bound < std::numeric_limits<double>::infinity()) chain.error += " within the cost given";
    return chain;
  }
  chain.cost = st[static_cast<size_t>(goal_id)].cost;
  for (int s = goal_id; s != 0; s = st[static_cast<size_t>(s)].parent) {
    const State& here_state = st[static_cast<size_t>(s)];
    ChainMove move = move_at(*factor_of[static_cast<size_t>(here_state.parent)], shape, full_bytes, here_state.via);
    chain.moves.insert(chain.moves.begin(), {std::move(move), *factor_of[static_cast<size_t>(s)]});
  }
  return chain;
}

}  // namespace

std::vector<ChainMove> chain_moves(const std::vector<LayoutFactor>& fs, const sema::Shape& shape, double full_bytes) {
  std::vector<ChainMove> out;
  MoveScratch sc;
  for_each_move(fs, shape, full_bytes, sc, [&](const MoveView& m) { out.push_back(materialize(m)); });
  return out;
}

// find_chain, remembered across calls. The chain depends on the shape only
// through which splits divide it, and every cost scales with the tensor's
// bytes: the search runs on the divisibility profile (gcd of each dim with
// the device count) at one byte, so the layers of every stage share it.
// A search under a finite `bound` (chain units: per device, one byte) is
// not remembered (it lands in `scratch`): what later calls find must not
// depend on which bounded searches ran before.
// Searches for one key on several threads at once (derive_communication
// runs its distinct searches on all cores, and distinct shapes share a
// profile) run once: the first computes, the others wait for its chain.
const Chain& cached_chain(const std::vector<LayoutFactor>& from, const std::vector<LayoutFactor>& to,
                          const sema::Shape& shape, bool exhaustive, double bound, Chain& scratch) {
  static std::mutex mu;
  static std::map<std::string, std::shared_future<Chain>> cache;  // entries stay: get() refers into them
  int64_t n = 1;
  for (const LayoutFactor& f : from) n *= f.n;
  sema::Shape profile;
  for (int64_t d : shape) profile.push_back(std::gcd(d, n));
  std::string k =
      factors_key(from) + "|" + factors_key(to) + "|" + sema::shape_to_string(profile) + (exhaustive ? "|x" : "");
  if (bound < std::numeric_limits<double>::infinity()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = cache.find(k);
      if (it != cache.end()) return it->second.get();
    }
    scratch = find_chain(from, to, profile, 1.0, exhaustive, bound);
    return scratch;
  }
  std::promise<Chain> mine;
  std::shared_future<Chain> chain;
  bool owner = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(k);
    owner = it == cache.end();
    chain = owner ? cache.emplace(k, mine.get_future().share()).first->second : it->second;
  }
  if (owner) {
    try {
      mine.set_value(find_chain(from, to, profile, 1.0, exhaustive, bound));
    } catch (...) {
      // (A check's deadline: the next call searches again.)
      {
        std::lock_guard<std::mutex> lock(mu);
        cache.erase(k);
      }
      mine.set_exception(std::current_exception());
    }
  }
  return chain.get();
}

}  // namespace nns::backend
