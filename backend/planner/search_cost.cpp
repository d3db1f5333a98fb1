// The plan search's per-op costs (search_internal.h): one op's time and
// memory under a decision, the reshards on an edge and at a unit's
// boundary, constraint checks and each op's options.
#include <algorithm>
#include <cmath>

#include "backend/planner/search_internal.h"

namespace nns::planner::search_detail {

std::vector<int> range_devices(int n, int stride) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i * stride);
  return v;
}

int out_layout(const SearchOp& op, const OpDecision& d, size_t k) {
  if (d.choice < 0) return kR;
  const sema::PartitionEffect& pe = op.choices[d.choice].out[k];
  if (pe.kind == sema::PartitionEffect::Split) return pe.dim;
  if (pe.kind == sema::PartitionEffect::PartialSum) return kV;
  return kR;
}

namespace {

double scale_of(const Env& e, const SearchOp& op, bool batch) { return op.batch_ok && batch ? e.s : 1.0; }

int in_need(const SearchOp& op, const OpDecision& d, size_t k) {
  if (d.choice < 0) return kR;
  const sema::PartitionEffect& pe = op.choices[d.choice].in[k];
  return pe.kind == sema::PartitionEffect::Split ? pe.dim : kR;
}
// The gradient of input k as the op's parts leave it.
int in_grad(const SearchOp& op, const OpDecision& d, size_t k, int tp) {
  if (d.choice < 0) return kR;
  const sema::PartitionEffect& pe = op.choices[d.choice].in[k];
  if (pe.kind == sema::PartitionEffect::Split) return pe.dim;
  return tp > 1 ? kV : kR;
}
// The gradient of output k as the op's parts need it.
int out_grad_need(const SearchOp& op, const OpDecision& d, size_t k) {
  int l = out_layout(op, d, k);
  return l == kV ? kR : l;
}

// `bytes`: the model's (fp32) bytes; the collective moves the precision's.
double reshard(const Env& e, int from, int to, double bytes) {
  if (e.tp <= 1 || from == to || from == kR || to == kV || bytes <= 0) return 0;
  const DeviceProfile& p = e.o.profile;
  // fp16/bf16 moves half the model's fp32 bytes (the search charged fp32
  // bytes: twice the Swin fp16 plan's reshards, 17.6 ms per block against
  // the simulator's 9.2).
  bytes *= e.o.bytes_per_element / 4.0;
  if (from == kV)
    return collective_time(p, to == kR ? Collective::AllReduce : Collective::ReduceScatter, bytes, e.tp_group);
  if (to == kR) return collective_time(p, Collective::AllGather, bytes, e.tp_group);
  return collective_time(p, Collective::AllToAll, bytes / e.tp, e.tp_group);
}

// The executor's local copies around one op's kernels, as the simulator
// prices them (program_cost.cpp's work_time: a measured copy or
// accumulate line, else read and write at memory bandwidth): each forward
// run collects every piece's outputs into their buffers (CollectOut), the
// backward collects every piece's input gradients (CollectGrad). An
// operand a piece holds whole (replicated, or partial sums) is copied
// once per piece. These are a tenth of the Swin 27B plan's busy time
// (4.7 of 58.4 s on its slowest rank).
double local_copy_time(const Env& e, const SearchOp& op, const OpDecision& d, int forwards) {
  const DeviceProfile& p = e.o.profile;
  const int k = std::max(1, d.k);
  const double sb = e.o.bytes_per_element / 4.0;  // the model's bytes are fp32 bytes
  auto copy = [&](double bytes) {
    if (bytes <= 0) return 0.0;
    if (p.copy.present()) return p.accumulate.present() ? p.accumulate.time(bytes) : p.copy.time(bytes);
    return p.memory_bandwidth > 0 ? 2 * bytes / p.memory_bandwidth : 0.0;
  };
  auto pieces = [&](bool split, double full) { return split ? full / e.tp : full * k; };
  double t = 0;
  for (size_t j = 0; j < op.out_tensor.size(); ++j) {
    if (op.out_tensor[j] < 0) continue;
    const bool split = d.choice >= 0 && op.choices[d.choice].out[j].kind == sema::PartitionEffect::Split;
    const double full = static_cast<double>(op.out_bytes[j]) * scale_of(e, op, op.out_batch[j]) * sb;
    // One copy per piece: the accumulate line prices per call, so k calls of a k-th.
    t += forwards * k * copy(pieces(split, full) / k);
  }
  if (!op.backward) return t;
  for (size_t j = 0; j < op.in_tensor.size(); ++j) {
    if (op.in_tensor[j] < 0 || e.m.data_input[op.in_tensor[j]]) continue;
    const bool split = d.choice >= 0 && op.choices[d.choice].in[j].kind == sema::PartitionEffect::Split;
    const double full = static_cast<double>(op.in_bytes[j]) * scale_of(e, op, op.in_batch[j]) * sb;
    t += k * copy(pieces(split, full) / k);
  }
  return t;
}

bool coshardable(const SearchOp& op) { return op.backward && (op.op_class == "matmul" || op.inner_bytes > 0); }

}  // namespace

OpCost op_cost(const Env& e, int opi, const OpDecision& d) {
  const SearchOp& op = e.m.ops[opi];
  OpCost c;
  const double frac_split = 1.0 / e.tp;
  auto in_frac = [&](size_t k) {
    return d.choice >= 0 && op.choices[d.choice].in[k].kind == sema::PartitionEffect::Split ? frac_split : 1.0;
  };
  auto out_frac = [&](size_t k) {
    return d.choice >= 0 && op.choices[d.choice].out[k].kind == sema::PartitionEffect::Split ? frac_split : 1.0;
  };
  double bytes = 0, outs = 0, outs_kept = 0, act_in = 0;
  for (size_t k = 0; k < op.in_tensor.size(); ++k) {
    if (op.in_tensor[k] < 0) continue;
    double b = static_cast<double>(op.in_bytes[k]) * scale_of(e, op, op.in_batch[k]) * in_frac(k);
    bytes += b;
    if (!op.in_param[k]) act_in += b;
    if (op.in_param[k]) {
      c.param += b;
      if (d.choice >= 0 && d.k > 1 && in_frac(k) < 1.0) c.param_multi += b;
      c.sync_dp += b;
      c.sync_params += 1;
      if (d.choice >= 0 && e.tp > 1 && in_frac(k) == 1.0) c.sync_tp += b;
    } else if (e.m.data_input[op.in_tensor[k]] && !e.rc) {
      c.kept += b;
    }
  }
  for (size_t k = 0; k < op.out_tensor.size(); ++k) {
    if (op.out_tensor[k] < 0) continue;
    double b = static_cast<double>(op.out_bytes[k]) * scale_of(e, op, op.out_batch[k]) * out_frac(k);
    bytes += b;
    outs += b;
    if (k < op.out_kept.size() && op.out_kept[k]) outs_kept += b;
  }
  const double inner_scale = (op.batch_ok ? e.s : 1.0) / (d.choice >= 0 ? e.tp : 1);
  double inner = static_cast<double>(op.inner_bytes) * inner_scale;
  const double inner_kept = static_cast<double>(op.inner_kept_bytes) * inner_scale;
  double flops = op.flops * (op.batch_ok ? e.s : 1.0) / (d.choice >= 0 ? e.tp : 1);
  const int k = std::max(1, d.k);
  c.fwd_time = k * compute_time(e.o.profile, op.op_class, e.o.dtype, flops / k,
                                (bytes + inner) * (e.o.bytes_per_element / 4.0) / k);
  if (!op.parts.empty()) {  // a composite: its nodes' rooflines, summed (search.h)
    // Per piece: a node the split divides runs a (tp k)-th; one it leaves
    // whole runs whole in each of the k pieces. Nodes without the batch
    // (Swin's shift mask) do not scale with the micro-batch.
    const SearchChoice* ch = d.choice >= 0 ? &op.choices[d.choice] : nullptr;
    double body = 0;
    for (size_t j = 0; j < op.parts.size(); ++j) {
      const NodeWork& w = op.parts[j];
      const bool batch = op.batch_ok && (j >= op.part_batch.size() || op.part_batch[j]);
      const bool divided = ch && (j >= ch->part_split.size() || ch->part_split[j]);
      const double share = (batch ? e.s : 1.0) / (divided ? static_cast<double>(e.tp) * k : 1.0);
      body +=
          compute_time(e.o.profile, w.op, e.o.dtype, w.flops * share, w.bytes * share * (e.o.bytes_per_element / 4.0));
    }
    c.fwd_time = k * body;
  }
  // Forward runs: the forward, the block's recompute, and a coshard
  // piece's own recompute before its backward. Inside a recomputed block
  // a coshard piece runs all three: the block's recompute makes its
  // outputs again for the block's other ops, and its own recompute brings
  // its values back one piece at a time (the lowered programs run it
  // thrice; nns simulate of the Swin 27B plan counts 6 x 1.39 ms per
  // block and micro-batch for fc1's 2 pieces).
  const int forwards = 1 + (op.backward && (e.rc || d.rc) ? 1 : 0) + (op.backward && e.rc && d.rc ? 1 : 0);
  c.time = c.fwd_time * (forwards + (op.backward ? 2.0 : 0.0));
  c.time += local_copy_time(e, op, d, forwards);
  // The search's analytic estimate of memory (the exact peak is the replay
  // of a lowered program, backend/lowering/memory_replay.h, which the search
  // cannot afford per candidate), after what lowering emits: the outputs
  // and body tensors some backward reads are kept until it runs, the rest
  // goes after the forward (SearchOp::out_kept, inner_kept_bytes); a block's
  // recompute makes its values again at once (`transient`,
  // summed over the unit), except coshard pieces, recomputed one at a time
  // before their own backward, which leave only their output buffer; an
  // op's backward moment (`work`, the largest counts): its input
  // gradients and their buffer, the output gradient's buffer, one piece's
  // gradients and, recomputed on its own, that piece's values.
  const bool own = d.rc && (!e.rc || k > 1);
  const double again = own ? (outs_kept + inner_kept) / k : 0.0;  // its recompute keeps what its backward reads
  if (e.rc)
    c.transient = own ? outs : outs + inner;
  else if (!d.rc)
    c.kept += outs_kept + inner_kept;  // what some backward reads; the rest goes after the forward
  c.work = 2 * act_in + outs + (outs + inner) / k + again;
  return c;
}

// Time of the reshards on the edge producer (po, output pk) -> consumer (ci, input ck), forward and backward.
double edge_time(const Env& e, int po, const OpDecision& pd, int pk, int ci, const OpDecision& cd, int ck) {
  const SearchOp& P = e.m.ops[po];
  const SearchOp& C = e.m.ops[ci];
  double bytes = static_cast<double>(P.out_bytes[pk]) * scale_of(e, P, P.out_batch[pk]);
  double t = reshard(e, out_layout(P, pd, pk), in_need(C, cd, ck), bytes);
  if (e.rc) t *= 2;  // the forward runs again
  if (P.backward && C.backward) t += reshard(e, in_grad(C, cd, ck, e.tp), out_grad_need(P, pd, pk), bytes);
  // One op split over the DP groups feeding one that is not: the batch gathered.
  if (P.batch_ok && !C.batch_ok && e.dp > 1)
    t += collective_time(e.o.profile, Collective::AllGather, bytes * e.dp * (e.o.bytes_per_element / 4.0), e.dp_group) *
         (C.backward ? 2 : 1);
  return t;
}

// Activation bytes the consumer's read adds to what the producer wrote: the
// checker keeps, per tensor and device, the union of the slices written
// and read (a replicated consumer of a split tensor holds all of it).
double edge_mem(const Env& e, int po, const OpDecision& pd, int pk, int ci, const OpDecision& cd, int ck) {
  if (e.rc) return 0;  // made again by the block's recompute
  const SearchOp& P = e.m.ops[po];
  const SearchOp& C = e.m.ops[ci];
  double bytes = static_cast<double>(P.out_bytes[pk]) * scale_of(e, P, P.out_batch[pk]);
  double wrote = pd.rc ? 0.0 : (out_layout(P, pd, pk) >= 0 ? 1.0 / e.tp : 1.0);
  double read = in_need(C, cd, ck) >= 0 ? 1.0 / e.tp : 1.0;
  return std::max(0.0, read - wrote) * bytes;
}

// The layout a tensor crosses a unit boundary in: replicated in the TP
// group, or (sequence parallel) split along its tokens, dim 1, where that
// divides. Units are solved apart, so both sides cost their reshard to and
// from this layout; the lowering itself moves data only where the two ops'
// pieces differ, so this bounds what it does.
int boundary_layout(const Env& e, int tensor) {
  if (!e.seq || e.tp <= 1 || tensor < 0 || e.m.producer[tensor] < 0) return kR;
  int64_t n = e.m.seq_len[static_cast<size_t>(tensor)];
  return n > 0 && n % e.tp == 0 ? 1 : kR;
}

// Costs of an op that involve ops outside its unit: inputs arrive in the
// boundary layout, outputs read outside leave in it. Activation bytes a
// recomputed block keeps (its inputs from outside) are added here too.
double boundary_time(const Env& e, int opi, const OpDecision& d, double* kept) {
  const SearchOp& op = e.m.ops[opi];
  const int unit = e.m.unit_of_op[opi];
  const double part = 1.0 / e.tp;
  auto frac = [&](int layout) { return layout >= 0 ? part : 1.0; };
  double t = 0;
  for (size_t k = 0; k < op.in_tensor.size(); ++k) {
    int tt = op.in_tensor[k];
    if (tt < 0 || op.in_param[k]) continue;
    int p = e.m.producer[tt];
    double bytes = static_cast<double>(op.in_bytes[k]) * scale_of(e, op, op.in_batch[k]);
    if (p >= 0 && e.m.unit_of_op[p] == unit) continue;
    const int b = boundary_layout(e, tt);
    t += reshard(e, b, in_need(op, d, k), bytes) * (e.rc ? 2 : 1);
    if (p >= 0 && e.m.ops[p].backward && op.backward) t += reshard(e, in_grad(op, d, k, e.tp), b, bytes);
    if (e.rc && kept) *kept += bytes * frac(in_need(op, d, k));
    // A consumer reading more of it than crossed (a replicated op after a
    // sequence-parallel boundary) holds the gathered tensor.
    else if (kept)
      *kept += std::max(0.0, frac(in_need(op, d, k)) - frac(b)) * bytes;
  }
  for (size_t k = 0; k < op.out_tensor.size(); ++k) {
    int tt = op.out_tensor[k];
    if (tt < 0) continue;
    bool outside = false;
    for (const auto& [c, ck] : e.m.consumers[tt]) outside = outside || e.m.unit_of_op[c] != unit;
    if (!outside) continue;
    double bytes = static_cast<double>(op.out_bytes[k]) * scale_of(e, op, op.out_batch[k]);
    const int b = boundary_layout(e, tt);
    t += reshard(e, out_layout(op, d, k), b, bytes) * (e.rc ? 2 : 1);
    if (op.backward) t += reshard(e, b, out_grad_need(op, d, k), bytes);
    // It leaves the unit in the boundary layout on every device of the group.
    if (!e.rc && kept) *kept += bytes * std::max(0.0, frac(b) - (d.rc ? 0.0 : frac(out_layout(op, d, k))));
  }
  return t;
}

double node_objective(const Env& e, int opi, const OpDecision& d, const Weights& w) {
  OpCost c = op_cost(e, opi, d);
  double kept = c.kept;
  double t = c.time + boundary_time(e, opi, d, &kept);
  // The gradient allreduces (bandwidth term; their latency is paid once per bucket).
  auto bw = [&](double bytes, const std::vector<int>& g) {
    return bytes > 0 ? collective_time(e.o.profile, Collective::AllReduce, bytes, g) -
                           collective_time(e.o.profile, Collective::AllReduce, 0, g)
                     : 0.0;
  };
  const double sb = e.o.bytes_per_element / 4.0;  // gradients at the precision's element size
  t += (bw(c.sync_dp * sb, e.dp_group) + bw(c.sync_tp * sb, e.tp_group)) / e.micro_batches;
  return t + w.act * kept + w.transient * c.transient + w.param * c.param;
}

bool decision_allowed(const SearchOp& op, const OpRules& r, const OpDecision& d, int tp, int dp) {
  if (d.choice >= 0) {
    const SearchChoice& c = op.choices[d.choice];
    if (r.has_split_only && std::find(r.split_only.begin(), r.split_only.end(), c.id) == r.split_only.end())
      return false;
    if (r.same_split_batch && c.is_batch) return false;
  }
  if (!r.counts.empty()) {
    int64_t parts = (op.batch_ok && dp > 1 ? dp : 1) * (d.choice >= 0 ? static_cast<int64_t>(tp) * d.k : 1);
    if (std::find(r.counts.begin(), r.counts.end(), parts) == r.counts.end()) return false;
  }
  return true;
}

bool has_score_core(const SearchModel& m) {
  return std::any_of(m.ops.begin(), m.ops.end(), [](const SearchOp& op) { return op.score_core; });
}

std::vector<OpDecision> op_options(const SearchModel& m, int opi, int tp, double s, bool rc, bool sel) {
  const SearchOp& op = m.ops[opi];
  // Selective recompute: a score core is recomputed alone whatever its
  // split (a coshard piece already is); block recompute covers it anyway.
  const bool alone = sel && !rc && op.score_core;
  std::vector<OpDecision> v{OpDecision{-1, 1, alone}};
  if (!op.batch_ok) return v;  // plan_text replicates ops without a batch on their stage
  for (size_t i = 0; i < op.choices.size(); ++i) {
    const SearchChoice& c = op.choices[i];
    double eff = static_cast<double>(c.size) * (c.is_batch ? s : 1.0);
    int64_t size = static_cast<int64_t>(std::llround(eff));
    if (std::fabs(eff - static_cast<double>(size)) > 1e-9 || size <= 0) continue;
    for (int k : {1, 2, 4, 8}) {
      if (k == 1 && tp == 1) continue;  // one part: not a split
      if (k > 1 && !coshardable(op)) continue;
      if (size % (static_cast<int64_t>(tp) * k) != 0) continue;
      v.push_back(OpDecision{static_cast<int>(i), k, k > 1 || alone});
    }
  }
  return v;
}

double log10_sum(double a, double b) {  // log10(10^a + 10^b)
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log10(1 + std::pow(10.0, lo - hi));
}

double log10_binom(int n, int k) {
  if (k < 0 || k > n) return -kInf;
  return (std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0)) / std::log(10.0);
}

}  // namespace nns::planner::search_detail
