#include "backend/lowering/memory_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace nns::backend {

namespace {

int64_t whole(double bytes) { return static_cast<int64_t>(std::llround(bytes)); }

// Which sub-op of the rank each full-graph tensor's bytes are charged to:
// the first kernel making it, else the first reading it, else (a tensor the
// rank only passes on) a sub-op of the op that makes it.
class Attribution {
 public:
  Attribution(const sema::Graph& g, const sema::Plan& plan, const RankProgram& prog) : g_(g), plan_(plan) {
    for (const SubOpKernel& k : prog.kernels)
      for (int t : g.node(k.node).outputs) of_tensor_.emplace(t, k.subop);
    for (const SubOpKernel& k : prog.kernels)
      for (int t : g.node(k.node).inputs) of_tensor_.emplace(t, k.subop);
  }
  int subop_of(int tensor) const {
    auto it = of_tensor_.find(tensor);
    if (it != of_tensor_.end()) return it->second;
    if (tensor < 0 || static_cast<size_t>(tensor) >= g_.tensors().size()) return -1;
    int producer = g_.tensor(tensor).producer;
    if (producer < 0) return -1;
    std::vector<int> leaves = plan_.leaves_of(producer);
    return leaves.empty() ? -1 : leaves[0];
  }

 private:
  const sema::Graph& g_;
  const sema::Plan& plan_;
  std::map<int, int> of_tensor_;
};

// A directive's place in the source, for grouping and ordering.
using LocKey = std::tuple<int, int, int>;
LocKey key_of(const front::SourceLoc& l) { return {l.file, l.line, l.col}; }

struct Share {
  front::SourceLoc loc;
  double bytes = 0;
};

// What is live at `rank`'s peak, by the directive that placed it.
std::map<LocKey, Share> live_by_directive(const sema::Graph& g, const sema::Plan& plan, const RankProgram& prog, const MemoryPeak& m,
                                          const MemoryCheckOptions& o) {
  Attribution who(g, plan, prog);
  std::map<LocKey, Share> out;
  auto charge = [&](int subop, double bytes) {
    if (subop < 0 || static_cast<size_t>(subop) >= plan.subops.size() || bytes <= 0) return;
    const sema::SubOp& s = plan.subops[static_cast<size_t>(subop)];
    const front::SourceLoc loc = s.assign_loc.valid() ? s.assign_loc : g.node(s.node).loc;
    Share& sh = out[key_of(loc)];
    sh.loc = loc;
    sh.bytes += bytes;
  };
  auto buffer_bytes = [&](int b) { return static_cast<double>(prog.buffers[static_cast<size_t>(b)].piece.numel()) * o.bytes_per_element; };
  for (size_t b = 0; b < prog.buffers.size(); ++b) {
    BufferDecl::Role r = prog.buffers[b].role;
    if (r == BufferDecl::Param || r == BufferDecl::Accum || r == BufferDecl::Shard)
      charge(who.subop_of(prog.buffers[b].tensor), buffer_bytes(static_cast<int>(b)));
  }
  for (const ParamSlot& s : prog.params)
    if (s.trainable && s.state() >= 0 && static_cast<size_t>(s.state()) < prog.buffers.size())
      charge(who.subop_of(s.tensor), buffer_bytes(s.state()) / o.bytes_per_element * 4 * (o.optimizer_slots + (o.bytes_per_element < 4 ? 1 : 0)));
  for (int b : m.live_buffers) charge(who.subop_of(prog.buffers[static_cast<size_t>(b)].tensor), buffer_bytes(b));
  for (const auto& [k, bytes] : m.kernel_bytes_at_peak)
    if (k >= 0 && static_cast<size_t>(k) < prog.kernels.size()) charge(prog.kernels[static_cast<size_t>(k)].subop, bytes);
  return out;
}

// The micro-batches with buffers live at the peak.
int micro_batches_live(const RankProgram& prog, const MemoryPeak& m) {
  std::set<int> mbs;
  for (int b : m.live_buffers)
    if (prog.buffers[static_cast<size_t>(b)].mb >= 0) mbs.insert(prog.buffers[static_cast<size_t>(b)].mb);
  return static_cast<int>(mbs.size());
}

front::Diagnostic overflow_diagnostic(const sema::Graph& g, const sema::Plan& plan, const RankMemory& r, const RankProgram& prog,
                                      const MemoryCheckOptions& o) {
  const MemoryPeak& m = r.peak;
  const std::string cap = o.capacity_label.empty() ? sema::format_bytes(o.capacity) : o.capacity_label;
  std::map<LocKey, Share> shares = live_by_directive(g, plan, prog, m, o);
  front::Diagnostic d;
  d.severity = front::Severity::Error;
  d.message = "device " + std::to_string(r.device) + " (rank " + std::to_string(r.rank) + ") needs " + sema::format_bytes(whole(m.peak)) +
              " at its peak (weights " + sema::format_bytes(whole(m.weights)) + ", gradients " + sema::format_bytes(whole(m.gradients)) +
              ", optimizer state " + sema::format_bytes(whole(m.optimizer)) + ", activations " + sema::format_bytes(whole(m.activations())) +
              ") but has " + cap + ": " + sema::format_bytes(whole(m.peak) - o.capacity) + " over";
  // The error at the directive placing the most; notes at the others, in
  // source order (file, line, column), the smallest left out past kMaxNotes.
  auto largest = std::max_element(shares.begin(), shares.end(), [](const auto& a, const auto& b) { return a.second.bytes < b.second.bytes; });
  if (largest != shares.end()) {
    d.loc = largest->second.loc;
    d.message += "; this directive places " + sema::format_bytes(whole(largest->second.bytes)) + " of it";
  }
  std::vector<double> sizes;
  for (const auto& [key, sh] : shares)
    if (key != largest->first) sizes.push_back(sh.bytes);
  std::sort(sizes.rbegin(), sizes.rend());
  const size_t kMaxNotes = 8;
  const double smallest_noted = sizes.size() > kMaxNotes ? sizes[kMaxNotes - 1] : 0;
  size_t noted = 0;
  for (const auto& [key, sh] : shares) {
    if (key == largest->first || sh.bytes < smallest_noted || noted == kMaxNotes) continue;
    ++noted;
    d.notes.push_back({front::Severity::Note, sh.loc, "places " + sema::format_bytes(whole(sh.bytes)) + " of device " + std::to_string(r.device) + "'s peak", {}});
  }
  if (sizes.size() > noted && largest != shares.end())
    d.notes.push_back({front::Severity::Note, largest->second.loc,
                       std::to_string(sizes.size() - noted) + " more placement(s) hold the remaining " +
                           sema::format_bytes(whole(std::accumulate(sizes.begin() + static_cast<long>(noted), sizes.end(), 0.0))) + " of it", {}});
  const int in_flight = micro_batches_live(prog, m);
  const front::SourceLoc sched = !plan.schedules.empty() ? plan.schedules[0].loc : !plan.task_orders.empty() ? plan.task_orders[0].loc : front::SourceLoc{};
  if (sched.valid() && in_flight > 1)
    d.notes.push_back({front::Severity::Note, sched, "keeps " + std::to_string(in_flight) + " micro-batches' buffers live at the peak", {}});
  return d;
}

}  // namespace

MemoryCheck check_memory_classes(const sema::Graph& g, const sema::Plan& plan, const LoweredPlan& bodies,
                                 const std::vector<ClassMember>& members, const MemoryCheckOptions& opts) {
  MemoryCheck out;
  std::vector<MemoryPeak> peaks;
  for (const RankProgram& prog : bodies.programs)
    peaks.push_back(peak_memory(prog, opts.bytes_per_element, opts.optimizer_slots, opts.bf16_storage));
  out.programs = static_cast<int>(peaks.size());
  for (const ClassMember& m : members) {
    RankMemory r;
    r.rank = m.rank;
    r.device = m.device;
    r.peak = peaks.at(static_cast<size_t>(m.program));
    if (out.worst < 0 || r.peak.peak > out.ranks[static_cast<size_t>(out.worst)].peak.peak)
      out.worst = static_cast<int>(out.ranks.size());
    out.ranks.push_back(std::move(r));
  }
  if (opts.capacity < 0 || out.worst < 0) return out;
  const RankMemory& w = out.ranks[static_cast<size_t>(out.worst)];
  if (whole(w.peak.peak) <= opts.capacity) return out;
  out.fits = false;
  out.overflow = overflow_diagnostic(
      g, plan, w, bodies.programs[static_cast<size_t>(members[static_cast<size_t>(out.worst)].program)], opts);
  return out;
}

MemoryCheck check_memory(const sema::Graph& g, const sema::Plan& plan, const LoweredPlan& lp, const MemoryCheckOptions& opts) {
  // Every program its own class.
  std::vector<ClassMember> members;
  for (size_t i = 0; i < lp.programs.size(); ++i)
    members.push_back({lp.programs[i].rank, lp.programs[i].device, static_cast<int>(i)});
  return check_memory_classes(g, plan, lp, members, opts);
}

std::string memory_line(const MemoryCheck& m, const MemoryCheckOptions& opts) {
  if (m.worst < 0) return "memory: no rank program";
  const RankMemory& r = m.ranks[static_cast<size_t>(m.worst)];
  const MemoryPeak& p = r.peak;
  std::string line = "memory: peak " + sema::format_bytes(whole(p.peak)) + " (" + std::to_string(whole(p.peak)) + " bytes) on device " +
                     std::to_string(r.device) + " (rank " + std::to_string(r.rank) + ": weights " + sema::format_bytes(whole(p.weights)) +
                     ", gradients " + sema::format_bytes(whole(p.gradients)) + ", optimizer " + sema::format_bytes(whole(p.optimizer)) +
                     ", activations " + sema::format_bytes(whole(p.activations())) + ")";
  if (opts.capacity >= 0) line += " of " + (opts.capacity_label.empty() ? sema::format_bytes(opts.capacity) : opts.capacity_label);
  else line += "; no capacity assumed (--device-memory SIZE or a device profile's name checks it)";
  if (opts.bytes_per_element < 4) line += "; mixed precision: 2-byte weights, gradients and activations, fp32 optimizer state and master weights";
  else if (opts.bf16_storage)
    line += "; bf16 activation storage: bf16 kernel activations, fp32 buffers, weights, gradients and optimizer state";
  return line;
}

}  // namespace nns::backend
