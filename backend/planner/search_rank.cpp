// The plan search's ranking (search.h, step 3; search_internal.h): at one
// grid point with its unit solutions fixed, the stage partition with the
// smallest bottleneck that fits (bisection over greedy packings, or every
// partition when exhaustive), the candidate's step time and memory; then
// the candidates found ordered and the runners-up picked.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "backend/lowering/lower_plan.h"
#include "backend/planner/search_internal.h"

namespace nns::planner {

bool Candidate::replicated() const {
  if (tp <= 1 || megatron) return false;
  for (const OpDecision& d : ops)
    if (d.choice >= 0) return false;
  return true;
}

std::string Candidate::describe() const {
  char buf[320];
  char inter[48] = "";
  if (vp > 1) std::snprintf(inter, sizeof inter, ", interleaved v %d", vp);
  std::snprintf(buf, sizeof buf, "pp %d x tp %d x dp %d%s, %lld micro-batch(es) of %lld%s%s%s%s", pp, tp, dp, inter,
                static_cast<long long>(micro_batches), static_cast<long long>(micro_batch),
                recompute ? ", recompute" : (selective ? ", selective recompute" : ""), zero1 ? ", zero1" : "",
                seq ? ", sequence parallel" : "", replicated() ? ", no op split (replicated)" : "");
  return buf;
}

namespace search_detail {

namespace {

struct Range {  // units a..b, one pipeline stage (a chunk, when interleaved)
  int a, b;
};

class StagePartitioner {
 public:
  explicit StagePartitioner(const StageProblem& p)
      : p_(p), U_(static_cast<int>(p.m.units.size())), v_(std::max(1, p.vp)), n_(p.gr.pp * std::max(1, p.vp)) {
    // The packing asks for the same cuts many times (more of them with
    // interleaving's pp x v stages): costed once here.
    cut_.resize(std::max(0, U_ - 1));
    for (int u = 0; u + 1 < U_; ++u) cut_[u] = cut_cost(u);
    find_tied();
  }

  double cut_time(int u) const { return u < 0 || u >= U_ - 1 ? 0.0 : cut_[u]; }

  // Model (fp32) bytes per device of the activations crossing the cut
  // after unit u, per micro-batch. Sequence-parallel tensors: each TP rank
  // sends its slice, in parallel.
  double cut_bytes(int u) const {
    const double s = p_.e.s;
    return p_.cuts.batch[u] * s + p_.cuts.fixed[u] - p_.cut_split[u] * s * (1.0 - 1.0 / p_.gr.tp);
  }

  // The send of the activations crossing the cut after unit u (and back).
  double cut_cost(int u) const {
    double bytes = cut_bytes(u);
    // The next stage's devices: dp x tp on inside the plan, tp on in a
    // plan replica.
    std::vector<int> pair{0, p_.e.replica_devices > 0 ? p_.gr.tp : p_.gr.dp * p_.gr.tp};
    bytes *= p_.o.bytes_per_element / 4.0;  // the model's bytes are fp32 bytes
    return 2 * collective_time(p_.o.profile, Collective::SendRecv, bytes, pair);
  }

  // Peak bytes per device of units a..b on 1F1B stage `stage`: 1F1B keeps
  // min(pp - s, m) micro-batches in flight on stage s.
  double stage_mem(int a, int b, int stage) const {
    double inflight = p_.gr.pp > 1 ? static_cast<double>(std::min<int64_t>(p_.gr.pp - stage, p_.mcount)) : 1.0;
    return mem_of({Range{a, b}}, inflight);
  }

  // Peak bytes per device of rank r holding the chunks `rs` under
  // interleaved 1F1B. Megatron's schedule (the reference's definition,
  // semantics/pipeline_schedule.cpp's interleaved_order) runs
  // w = min(2(p - 1 - r) + (v - 1) p, m v) chunk forwards before rank r's
  // first backward and one more in the steady state, so min(w + 1, m v)
  // chunks' activations are live: (w + 1) / v micro-batches of the rank's
  // whole activations, taking its chunks as even (on rank 0 that is
  // (v p + p - 1) / v, the reference's p (1 + (p - 1) / (p v)) x A).
  double rank_mem(const std::vector<Range>& rs, int r) const {
    const int64_t p = p_.gr.pp;
    const int64_t w = std::min<int64_t>(2 * (p - 1 - r) + (v_ - 1) * p, p_.mcount * v_);
    const double chunks = static_cast<double>(std::min<int64_t>(w + 1, p_.mcount * v_));
    return mem_of(rs, chunks / v_);
  }

  // Bytes per device of the units of `rs` with `inflight` micro-batches'
  // activations kept.
  double mem_of(const std::vector<Range>& rs, double inflight) const {
    double param = 0, multi = 0, kept = 0, tr = 0, work = 0, fwd_sent = 0;
    for (const Range& r : rs) {
      if (r.b < U_ - 1) fwd_sent += cut_bytes(r.b);
      // A unit's backward moment comes after the backward of the units
      // after it in the stage, which freed their kept values.
      double after = 0;
      for (int u = r.b; u >= r.a; --u) {
        const UnitStats& st = p_.sol[u]->second;
        param += st.param;
        multi += st.param_multi;
        kept += st.kept;
        tr = std::max(tr, st.transient);
        work = std::max(work, st.work - after);
        after += st.kept;
      }
    }
    // Weights and the accumulated gradient at the element size (+ with
    // zero1 two shards' worth: the shard's gradient and its update);
    // fp32 optimizer state (+ fp32 master weights below fp32). The model's
    // bytes are fp32 bytes. A micro-batch's gradient contributions are
    // added into the accumulated gradient by the kernel that makes them
    // (the replay holds no third copy: GPT tiny, 463 KiB of weights,
    // 463 KiB of gradients, where this counted 926).
    const double sb = p_.o.bytes_per_element / 4.0;
    const int slots = p_.o.optimizer_slots;
    auto per_param = [&](double z) {
      const double state = (slots + (p_.o.bytes_per_element < 4 ? 1.0 : 0.0)) / z;
      return sb * (2.0 + (z > 1 ? 2.0 / z : 0.0)) + state;
    };
    // A buffer sent stays until the step ends (the memory replay parks a
    // sent buffer's Free there: the executor holds it until its send
    // completes). Under block recompute, whose kept activations do not
    // hold a block's outputs, the activations a rank sends on are counted
    // for every micro-batch: GPT-3 175B fp16, pp 8 x tp 4, v 4, 48
    // micro-batches, sequence parallel: 28.31 GiB estimated without this
    // term, 30.46 replayed, the term 2.25 GiB; GPT tiny_pipe pp 2 x 4
    // micro-batches: the replay keeps 4 micro-batches' buffers at the
    // peak, 1F1B's in-flight count 2. Counting the gradients sent back
    // too, or the sends beyond the in-flight ones without recompute, put
    // the estimate 29-40% above the replay on the 175B plans: what the
    // replay holds there is not examined yet.
    const double parked = p_.e.rc ? static_cast<double>(p_.mcount) * fwd_sent : 0.0;
    const double tied = tied_bytes(rs);
    const double repeated = repeated_tied(rs);
    return (param - multi - tied - repeated) * per_param(zdiv()) + (multi + tied) * per_param(1) +
           sb * (kept * inflight + tr + work + parked);
  }

  // zero1 and tied weights: a weight read by units on different ranks (GPT's
  // wte: the embedding on the first stage, the output layer on the last)
  // has its gradient summed across those ranks, not over one data-parallel
  // group, so the lowering does not shard it ("zero1: wte is not sharded",
  // nns check's note): each of its pieces a rank of `rs` holds, unless every
  // unit reading it is in `rs`.
  double tied_bytes(const std::vector<Range>& rs) const {
    // The distributed optimizer that zero1 becomes over plan replicas
    // shards every trained parameter, tied ones included
    // (lower_step_end.cpp, shard_over_replicas).
    if (tied_.empty() || !p_.z1 || p_.e.replica_devices > 0) return 0;
    auto inside = [&](int u) {
      for (const Range& r : rs)
        if (u >= r.a && u <= r.b) return true;
      return false;
    };
    double bytes = 0;
    for (const Range& r : rs)
      for (int u = r.a; u <= r.b; ++u)
        for (const TiedUse& t : tied_[u]) {
          bool local = true;
          for (int w : p_.m.tied_units.at(t.tensor)) local = local && inside(w);
          if (!local) bytes += t.bytes;
        }
    return bytes;
  }

  // A tied weight read by several units of `rs` (GPT's wte: the embedding
  // and the output layer on one stage) is one buffer on the device, which
  // the units' parameter bytes count once per reading unit: the bytes
  // counted beyond the largest read (GPT tiny on one device: 64 KiB of
  // weights, 256 KiB with their gradient and AdamW state, a quarter of
  // the estimate's excess over the replay).
  double repeated_tied(const std::vector<Range>& rs) const {
    std::map<int, std::pair<double, double>> reads;  // tensor -> (sum, largest)
    for (const Range& r : rs)
      for (int u = r.a; u <= r.b && !tied_.empty(); ++u)
        for (const TiedUse& t : tied_[u]) {
          auto& [sum, most] = reads[t.tensor];
          sum += t.bytes;
          most = std::max(most, t.bytes);
        }
    double bytes = 0;
    for (const auto& [tensor, sm] : reads) bytes += sm.first - sm.second;
    return bytes;
  }

  // One micro-batch's forward and backward through units a..b, with half
  // of the transfers at both its ends: each cut's send and its gradient's
  // way back are charged once, half to each side. A Send does not hold
  // its sender and a Recv waits only for what has not arrived
  // (backend/planner/simulator.cpp), so a transfer delays one side, not
  // both; charging every chunk its sends in full over-predicted BERT
  // tiny_pipe at v 2 by 1.55x (dropping them, under-predicted by 2x: at
  // that size the transfers are on the step's path).
  double stage_time(int a, int b) const {
    double t = (cut_time(a - 1) + cut_time(b)) / 2;
    for (int u = a; u <= b; ++u) t += p_.sol[u]->second.time;
    return t;
  }

  Candidate evaluate(const std::vector<int>& starts) const;
  int stages() const { return n_; }
  Candidate exhaustive() const;
  Candidate bisect() const;

 private:
  double zdiv() const { return p_.z1 ? p_.gr.dp : 1; }
  double rank_sync(const std::vector<Range>& rs) const;
  // Whether units a..b fit as stage st while packing. Interleaved: a chunk
  // shares its rank with v - 1 others not packed yet, so only the whole
  // rank is held to the capacity, in evaluate.
  bool packs(int a, int b, int st) const { return v_ > 1 || stage_mem(a, b, st) <= p_.cap; }
  bool pack(double T, std::vector<int>& starts) const;
  // Per unit, the tied weights its ops read (by tensor) and their bytes per
  // device under the unit's decisions; per tied weight, its units.
  struct TiedUse {
    int tensor;
    double bytes;
  };
  void find_tied();
  std::vector<std::vector<TiedUse>> tied_;
  const StageProblem& p_;
  const int U_;
  const int v_;              // chunks per rank
  const int n_;              // pipeline stages: pp x v
  std::vector<double> cut_;  // cut_cost per unit
};

void StagePartitioner::find_tied() {
  if (p_.m.tied_units.empty()) return;
  tied_.assign(U_, {});
  for (int u = 0; u < U_; ++u)
    for (const auto& [pos, k] : p_.m.tied_reads[u]) {
      const SearchOp& op = p_.m.ops[p_.m.units[u].ops[pos]];
      const OpDecision& d = p_.sol[u]->first[pos];
      const bool split = d.choice >= 0 && op.choices[d.choice].in[k].kind == sema::PartitionEffect::Split;
      if (split && d.k > 1) continue;  // coshard pieces: counted unsharded already (param_multi)
      tied_[u].push_back(TiedUse{op.in_tensor[k], static_cast<double>(op.in_bytes[k]) / (split ? p_.gr.tp : 1)});
    }
}

// The buckets the replica averages of `bytes` of gradients (fp32 bytes,
// as the lowering counts them) make, over `places` where gradients become
// final: the lowering closes a bucket once it holds replica_bucket_bytes,
// and only between two such places (lower_step_end.cpp,
// place_replica_averages), so about bytes / that, at most one per place.
// A place is a parameter's last gradient contribution, or under a
// pipeline schedule the end of the task that holds it: the rank's last
// backward of each of its chunks. `profile_cap`: the profile's bucket
// size (planner::profile_bucket_bytes), which the lowering then uses; 0: none.
double replica_buckets(double bytes, double places, size_t profile_cap) {
  if (bytes <= 0 || places <= 0) return 0;
  const double cap =
      static_cast<double>(profile_cap > 0 ? profile_cap : backend::replica_bucket_bytes(static_cast<size_t>(bytes)));
  return std::max(1.0, std::min(places, std::ceil(bytes / cap)));
}

// The gradient synchronisation of one rank's units and the optimizer update.
double StagePartitioner::rank_sync(const std::vector<Range>& rs) const {
  double sdp = 0, stp = 0, par = 0, params = 0;
  for (const Range& r : rs)
    for (int u = r.a; u <= r.b; ++u) {
      params += p_.sol[u]->second.sync_params;
      sdp += p_.sol[u]->second.sync_dp;
      stp += p_.sol[u]->second.sync_tp;
      par += p_.sol[u]->second.param;
    }
  // No gradient to reduce, no collective: a TP group that splits no op
  // has no partial weight gradients, and was charged an allreduce's
  // latency for zero bytes (BERT tiny: 0.036 ms per step on 4 devices
  // replicating every op, against 0.006 ms on one).
  auto allreduce = [&](double bytes, const std::vector<int>& group) {
    return bytes > 0 ? collective_time(p_.o.profile, Collective::AllReduce, bytes, group) : 0.0;
  };
  const double sb = p_.o.bytes_per_element / 4.0;  // gradients at the precision's element size
  double ts = allreduce(sdp * sb, p_.e.dp_group) + allreduce(stp * sb, p_.e.tp_group);
  // The data-parallel collectives that each pay their latency beyond the
  // one charged above. zero1 inside the plan: the lowering gives every
  // sharded parameter a bucket of its own, one reduce-scatter of its
  // gradient and one all-gather of its update each (lower_internal.h,
  // plan_zero1): 68 parameters of GPT tiny on 2 ranks, 0.68 ms, where one
  // bucketed allreduce costs 10 us. Over plan replicas: the replica
  // averages go in buckets of replica_bucket_bytes (about four for a
  // small model; one per chunk at most under a pipeline schedule), each an
  // allreduce, or with the distributed optimizer a reduce-scatter and an
  // all-gather (GPT tiny, dp 4 replicas: 4 buckets, 124 us simulated, where
  // one allreduce is 34 us).
  const double places = p_.gr.pp > 1 ? static_cast<double>(rs.size()) : params;
  const double messages = p_.e.replica_devices > 0
                              ? replica_buckets(sdp, places, profile_bucket_bytes(p_.o.profile, p_.e.dp))
                              : (p_.z1 ? params : 1);
  if (sdp > 0 && messages > 1) {
    const auto& g = p_.e.dp_group;
    const double latency = p_.z1 ? collective_time(p_.o.profile, Collective::ReduceScatter, 0, g) +
                                       collective_time(p_.o.profile, Collective::AllGather, 0, g)
                                 : collective_time(p_.o.profile, Collective::AllReduce, 0, g);
    ts += (messages - 1) * latency;
  }
  double elems = par / 4.0 / zdiv();  // the model's parameter bytes are fp32
  ts += compute_time(p_.o.profile, "elementwise", p_.o.dtype, 12 * elems, 4.0 * p_.o.bytes_per_element * elems);
  return ts;
}

Candidate StagePartitioner::evaluate(const std::vector<int>& starts) const {
  const GridPoint& gr = p_.gr;
  Candidate c;
  c.pp = gr.pp;
  c.tp = gr.tp;
  c.dp = gr.dp;
  c.vp = v_;
  c.micro_batches = p_.mcount;
  c.micro_batch = p_.mb;
  c.recompute = p_.e.rc;
  c.selective = p_.e.sel;
  c.zero1 = p_.z1;
  c.seq = p_.e.seq;
  c.megatron = p_.megatron;
  c.replicas = p_.e.replica_devices > 0;
  c.unit_stage.assign(U_, 0);
  // Per rank: its stages (v chunks when interleaved, chunk c on rank
  // c % pp) and their time per micro-batch, sends included.
  std::vector<std::vector<Range>> ranks(gr.pp);
  std::vector<double> rank_time(gr.pp, 0.0), rank_work(gr.pp, 0.0);
  // Per chunk (interleaved): its forward and backward per micro-batch and
  // the one-way transfer to the next chunk, for the dependency chain.
  std::vector<double> fwd(n_, 0.0), bwd(n_, 0.0), link(n_, 0.0);
  double tsum = 0;
  const char* debug = std::getenv("NNS_SEARCH_DEBUG");
  for (int st = 0; st < n_; ++st) {
    int a = starts[st], b = (st + 1 < n_ ? starts[st + 1] : U_) - 1;
    if (b < a) return Candidate{};
    for (int u = a; u <= b; ++u) {
      c.unit_stage[u] = st;
      fwd[st] += p_.sol[u]->second.fwd;
      bwd[st] += p_.sol[u]->second.time - p_.sol[u]->second.fwd;
    }
    link[st] = cut_time(b) / 2;
    double t = stage_time(a, b);
    ranks[st % gr.pp].push_back(Range{a, b});
    rank_time[st % gr.pp] += t;
    rank_work[st % gr.pp] += fwd[st] + bwd[st];
    tsum += t;
    if (debug && std::atoi(debug) >= 3)
      std::fprintf(stderr, "  pp %d v %d tp %d m %lld rc %d l%d stage %d: units %d..%d, %.4g ms\n", gr.pp, v_, gr.tp,
                   static_cast<long long>(p_.mcount), p_.e.rc, p_.li, st, a, b, t * 1e3);
  }
  double tmax = 0, sync = 0, mem = 0;
  for (int r = 0; r < gr.pp; ++r) {
    tmax = std::max(tmax, rank_time[r]);
    mem = std::max(mem, v_ > 1 ? rank_mem(ranks[r], r) : stage_mem(ranks[r][0].a, ranks[r][0].b, r));
    sync = std::max(sync, rank_sync(ranks[r]));
  }
  sync += p_.loss_sync;
  c.stage_time = tmax;
  c.sync_time = sync;
  // 1F1B: (m - 1) x the slowest stage + one micro-batch through every
  // stage (the fill and drain). Interleaved 1F1B: each rank works m x its
  // v chunks, and the fill and drain pass through chunks, each 1/v of a
  // rank's time: m x tmax + (tsum - tmax) / v, so the bubble is
  // (p - 1) / (v m) of the ideal step with even stages (Narayanan et al.,
  // SC'21, section 2.2.2; the reference's interleaved bubble). With v = 1
  // the two are the same.
  // Interleaved: that closed form over-counts where the transfers between
  // chunks outweigh their work; the step follows the schedule's dependency
  // chain instead (search_chain.cpp), the bubble being what the busiest
  // rank does not work of it.
  const double m = static_cast<double>(p_.mcount);
  if (v_ == 1) {
    c.step_time = (m - 1) * tmax + tsum + sync;
    c.bubble = c.step_time > 0 ? (tsum - tmax) / c.step_time : 0;
  } else {
    const double span = interleaved_makespan(gr.pp, v_, p_.mcount, fwd, bwd, link);
    c.step_time = span + sync;
    c.bubble =
        span > 0 ? std::max(0.0, span - m * *std::max_element(rank_work.begin(), rank_work.end())) / c.step_time : 0;
  }
  c.memory = mem;
  c.fits = mem <= p_.cap;
  if (!c.fits && !p_.megatron) c.step_time = 0;  // does not fit
  return c;
}

// Every partition (tests): the fastest that fits.
Candidate StagePartitioner::exhaustive() const {
  Candidate best;
  const int pp = n_;
  std::vector<int> starts(pp, 0);
  std::function<void(int, int)> rec = [&](int st, int from) {
    if (st == pp) {
      Candidate c = evaluate(starts);
      if (c.step_time > 0 && c.fits && (best.step_time == 0 || c.step_time < best.step_time)) best = c;
      return;
    }
    for (int a = from; a <= U_ - (pp - st); ++a) {
      if (st == 0 && a != 0) break;
      starts[st] = a;
      rec(st + 1, a + 1);
    }
  };
  rec(0, 0);
  return best;
}

// Greedy packing under bottleneck T (stages take as many units as fit).
bool StagePartitioner::pack(double T, std::vector<int>& starts) const {
  const int pp = n_;
  starts.clear();
  int a = 0;
  for (int st = 0; st < pp && a < U_; ++st) {
    starts.push_back(a);
    int b = a;
    // Grow while the units (and the cut before) fit, then give
    // back units until the send after the stage fits too.
    auto open = [&](int x, int y) { return stage_time(x, y) - cut_time(y) / 2; };
    while (b + 1 < U_ && open(a, b + 1) <= T && packs(a, b + 1, st)) ++b;
    while (b > a && stage_time(a, b) > T) --b;
    if (stage_time(a, b) > T || !packs(a, b, st)) return false;
    a = b + 1;
  }
  if (a < U_) return false;
  // Fewer stages than pp: split the stage with most units (later stages keep fewer micro-batches in flight).
  while (static_cast<int>(starts.size()) < pp) {
    int widest = -1, width = 1;
    for (size_t st = 0; st < starts.size(); ++st) {
      int end = st + 1 < starts.size() ? starts[st + 1] : U_;
      if (end - starts[st] > width) {
        width = end - starts[st];
        widest = static_cast<int>(st);
      }
    }
    if (widest < 0) return false;
    starts.insert(starts.begin() + widest + 1, starts[widest] + width / 2);
  }
  return true;
}

// The smallest bottleneck whose greedy packing fits pp stages under memory.
Candidate StagePartitioner::bisect() const {
  double lo = 0, hi = stage_time(0, U_ - 1) * 1.0001 + 1e-12;
  std::vector<int> starts, good;
  if (!pack(hi, good)) return Candidate{};
  for (int it = 0; it < 40; ++it) {
    double mid = (lo + hi) / 2;
    if (pack(mid, starts)) {
      hi = mid;
      good = starts;
    } else {
      lo = mid;
    }
  }
  return evaluate(good);
}

}  // namespace

Candidate partition_stages(const StageProblem& p) {
  StagePartitioner sp(p);
  const int U = static_cast<int>(p.m.units.size());
  Candidate best = p.o.exhaustive ? sp.exhaustive() : sp.bisect();
  // A Megatron-style plan that fits nowhere is still reported (the
  // one needing the least memory, equal stages), for the comparison.
  if (p.megatron && best.step_time <= 0) {
    std::vector<int> starts;
    const int n = sp.stages();
    for (int st = 0; st < n; ++st) starts.push_back(static_cast<int>(static_cast<int64_t>(st) * U / n));
    best = sp.evaluate(starts);
  }
  if (std::getenv("NNS_SEARCH_DEBUG") && best.step_time <= 0)
    std::fprintf(stderr, "pp %d tp %d dp %d m %lld rc %d l%d: no partition (whole %.4g ms, mem %.4g)\n", p.gr.pp,
                 p.gr.tp, p.gr.dp, static_cast<long long>(p.mcount), p.e.rc, p.li, sp.stage_time(0, U - 1) * 1e3,
                 sp.stage_mem(0, U - 1, 0));
  return best;
}

namespace {

// The better of two baseline candidates: one that fits first, then the
// faster, or (neither fitting) the leaner.
bool better_baseline(const Candidate& a, const Candidate& b) {
  if (a.fits != b.fits) return a.fits;
  return a.fits ? a.step_time < b.step_time : a.memory < b.memory;
}

}  // namespace

void Ranking::add(Candidate c) {
  if (!c.megatron) {
    found.push_back(std::move(c));
    return;
  }
  // The fixed layout at tp 1 replicates every op: data parallelism when
  // there is no pipeline; a pipeline without TP is no baseline of either.
  Candidate* slot = c.tp > 1 ? &megatron : (c.pp == 1 ? &data_parallel : nullptr);
  bool* seen = c.tp > 1 ? &megatron_found : &data_parallel_found;
  if (!slot) return;
  if (!*seen || better_baseline(c, *slot)) {
    *slot = std::move(c);
    *seen = true;
  }
}

void Ranking::finish(SearchResult& res, const SearchOptions& o, double cap) {
  // Equal step times (coshard inside a recomputed block costs no extra time
  // in the model): the leaner plan first, so the result does not depend on
  // which lambda or which constraint table reached it first.
  std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return a.step_time != b.step_time ? a.step_time < b.step_time : a.memory < b.memory;
  });
  // Distinct runners-up: one per (pp, v, tp, dp, m, rc, selective, zero1).
  std::set<std::tuple<int, int, int, int, int64_t, bool, bool, bool>> seen;
  for (Candidate& c : found) {
    if (static_cast<int>(res.best.size()) >= std::max(1, o.top)) break;
    if (!seen.insert({c.pp, c.vp, c.tp, c.dp, c.micro_batches, c.recompute, c.selective, c.zero1}).second) continue;
    res.best.push_back(std::move(c));
  }
  res.megatron.best = megatron;
  res.megatron.applies = megatron_found;
  res.data_parallel.best = data_parallel;
  res.data_parallel.applies = data_parallel_found;
  if (res.best.empty()) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "no plan of the space fits %.2f MiB per device (%.0f%% of the capacity, the search's margin)",
                  cap / (1 << 20), o.memory_margin * 100);
    res.note = buf;
  }
}

}  // namespace search_detail
}  // namespace nns::planner
