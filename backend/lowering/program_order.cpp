#include "backend/lowering/program_order.h"
#include "backend/lowering/parallel.h"
#include "semantics/check_deadline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

namespace nns::backend::detail {

namespace {

// One collective (or update) of a rank's program, as the matching sees it.
struct Entry {
  enum Kind { Coll, Bucket, Replica, Loss, Update, ZeroScatter, ZeroGather } kind = Coll;
  // Point-to-point: a send or recv is posted and the rank goes on; a
  // wait blocks until the matching send (same pair and tag) is posted.
  enum P2P { None, SendPost, RecvPost, RecvWait } p2p = None;
  int peer = -1;
  int edge = -1, step = -1, mb = -1, group = -1, bucket = -1, param = -1;
  uint32_t tag = 0;
  double scale = 1;
  bool operator==(const Entry& o) const {
    return kind == o.kind && edge == o.edge && step == o.step && mb == o.mb && group == o.group && bucket == o.bucket &&
           param == o.param && tag == o.tag;
  }
};

// What instruction `in` of program `p` is to the matching; false for an
// instruction that is neither a collective nor an update.
bool entry_of(const RankProgram& p, const PInstr& in, Entry& e) {
  e = Entry{};
  e.group = in.group;
  e.mb = in.mb;
  if (in.edge < 0 && (in.kind == PInstr::ReduceScatter || in.kind == PInstr::AllGather)) {
    // zero1: a parameter's gradient cut into shards, or its shards gathered.
    e.kind = in.kind == PInstr::ReduceScatter ? Entry::ZeroScatter : Entry::ZeroGather;
    e.param = p.buffers[static_cast<size_t>(in.a)].tensor;
    return true;
  }
  switch (in.kind) {
    case PInstr::AllReduce:
    case PInstr::AllGather:
    case PInstr::ReduceScatter:
    case PInstr::AllToAll:
    case PInstr::Send:
    case PInstr::Recv:
    case PInstr::Wait:
      e.kind = Entry::Coll;
      e.p2p = in.kind == PInstr::Send   ? Entry::SendPost
              : in.kind == PInstr::Recv ? Entry::RecvPost
              : in.kind == PInstr::Wait ? Entry::RecvWait
                                        : Entry::None;
      e.peer = in.peer;
      e.edge = in.edge;
      e.step = in.step;
      e.tag = in.tag;
      return true;
    case PInstr::BucketAllReduce:
      e.kind = Entry::Bucket;
      e.bucket = in.index;
      return true;
    case PInstr::ReplicaAverage:
      e.kind = Entry::Replica;
      e.param = p.buffers[static_cast<size_t>(in.a)].tensor;
      e.scale = in.scale;
      return true;
    case PInstr::LossAllReduce: e.kind = Entry::Loss; return true;
    case PInstr::Update:
      e.kind = Entry::Update;
      e.param = p.buffers[static_cast<size_t>(in.a)].tensor;
      e.group = -1;
      return true;
    default: return false;
  }
}

// A rank's sequence of collectives and updates, read off its program (a
// skeleton's instructions name the buffers of `body`, LoweredPlan::body).
std::vector<Entry> entries_of(const RankProgram& p, const RankProgram* body = nullptr) {
  std::vector<Entry> seq;
  Entry e;
  for (const PInstr& in : p.instrs)
    if (entry_of(body ? *body : p, in, e)) seq.push_back(e);
  return seq;
}

// Seeded bugs in the derived communication (before lowering): the first
// allreduce (or send/recv) of an edge the programs run.
}  // namespace

bool seed_comm_bug(const sema::Graph& g, CommPlan& cp, const std::vector<int>& used, int devices, SeededBug bug,
                   ProgramCheck& out) {
  bool on_allreduce = bug == SeededBug::MissingAllreduce || bug == SeededBug::AllgatherForAllreduce ||
                      bug == SeededBug::DoubleCount || bug == SeededBug::WrongGroup;
  if (!on_allreduce && bug != SeededBug::WrongStageDevice) return true;
  AdapterStep::Prim prim = on_allreduce ? AdapterStep::AllReduce : AdapterStep::SendRecv;
  int ei = -1, si = -1;
  for (int i : used)
    for (size_t s = 0; s < cp.edges[i].adapter.steps.size() && ei < 0; ++s)
      if (cp.edges[i].adapter.steps[s].prim == prim) {
        ei = i;
        si = static_cast<int>(s);
      }
  if (ei < 0) {
    out.errors.push_back(std::string("seeded bug does not apply: the plan has no ") +
                         (on_allreduce ? "allreduce" : "send/recv") + " to corrupt");
    out.seed_not_applicable = true;
    return false;
  }
  auto& steps = cp.edges[ei].adapter.steps;
  std::string where = edge_text(g, cp.edges[ei]);
  if (bug == SeededBug::MissingAllreduce) {
    steps.erase(steps.begin() + si);
    out.applied = "dropped the allreduce of " + where;
  } else if (bug == SeededBug::AllgatherForAllreduce) {
    steps[si].prim = AdapterStep::AllGather;
    steps[si].dim = 0;
    out.applied = "an allgather instead of the allreduce of " + where;
  } else if (bug == SeededBug::DoubleCount) {
    steps.insert(steps.begin() + si, steps[si]);
    out.applied = "the allreduce of " + where + " runs twice";
  } else if (bug == SeededBug::WrongGroup) {
    // Swap the last member of the first group with a device outside it
    // (or drop it when every device is in the group).
    auto& grp = steps[si].groups[0];
    int outside = -1;
    for (int d = 0; d < devices && outside < 0; ++d)
      if (std::find(grp.begin(), grp.end(), d) == grp.end()) outside = d;
    std::string before = group_text(grp);
    if (outside >= 0 && steps[si].groups.size() == 1)
      grp.back() = outside;
    else
      grp.pop_back();
    std::sort(grp.begin(), grp.end());
    out.applied = "the allreduce of " + where + " runs over " + group_text(grp) + " instead of " + before;
  } else {
    // Any device but the sender and the receiver; on 2 devices there is
    // none, so the sender sends to itself (the receiver still gets nothing).
    auto& pr = steps[si].groups[0];
    int wrong = pr[0];
    for (int k = 1; k < devices; ++k) {
      int d = (pr[1] + k) % devices;
      if (d != pr[0] && d != pr[1]) {
        wrong = d;
        break;
      }
    }
    out.applied =
        "send/recv of " + where + " goes to device " + std::to_string(wrong) + " instead of " + std::to_string(pr[1]);
    pr[1] = wrong;
  }
  return true;
}

bool seed_replica_scale(const sema::Graph& g, RankProgram& p, int replicas, SeededBug bug, std::string& applied) {
  for (PInstr& in : p.instrs)
    if (in.kind == PInstr::ReplicaAverage) {
      in.scale = bug == SeededBug::ReplicaScale ? 1.f : in.scale * 1.01f;
      applied = "replica 1 averages the gradient of " + g.tensor(p.buffers[static_cast<size_t>(in.a)].tensor).name +
                " with factor " + std::to_string(in.scale) + " instead of 1/" + std::to_string(replicas);
      return true;
    }
  return false;
}

namespace {

// The order checks over the ranks' programs: updates after every
// reduction of their gradient, one replica scale, and matching (a
// collective runs when every member of its group has it next).
class OrderCheck {
 public:
  OrderCheck(const sema::Graph& g, LoweredPlan& lp, ProgramCheck& out) : g_(g), lp_(lp), out_(out) {}

  // Seeded bugs in the lowered programs themselves.
  bool seed(SeededBug bug) {
    if (bug != SeededBug::ReplicaScale && bug != SeededBug::GradientScale1Pct && bug != SeededBug::EarlyUpdate &&
        bug != SeededBug::CollectiveOrder && bug != SeededBug::GradientCopies)
      return true;
    bool done = false;
    if (bug == SeededBug::GradientCopies) {
      RankProgram& p0 = lp_.programs[0];
      for (const ParamSlot& s : p0.params) {
        if (s.accum < 0 || done) continue;
        Piece& pc = p0.buffers[static_cast<size_t>(s.accum)].piece;
        if (pc.replicas <= 1) continue;
        pc.replicas = 1;
        pc.replica_index = 0;
        out_.applied =
            "rank 0's accumulated gradient of " + g_.tensor(s.tensor).name + " is not labelled as one of its copies";
        done = true;
      }
    }
    // replica-scale: factor 1 instead of 1/replicas; gradient-scale-1pct:
    // 1% too large (a subtle scaling mistake is caught as surely).
    bool scale = bug == SeededBug::ReplicaScale || bug == SeededBug::GradientScale1Pct;
    if (scale && lp_.replicas > 1) {
      if (lp_.programs.size() > static_cast<size_t>(lp_.devices))  // rank k: device 0 of replica 1
        done = seed_replica_scale(g_, lp_.programs[static_cast<size_t>(lp_.devices)], lp_.replicas, bug, out_.applied);
      else
        done = !out_.applied.empty();  // replicas held apart: seeded as replica 1 was lowered (program_check.cpp)
    }
    std::vector<PInstr>& sq = lp_.programs[0].instrs;
    if (bug == SeededBug::EarlyUpdate)
      for (size_t i = 0; i < sq.size() && !done; ++i)
        if (sq[i].kind == PInstr::Update)
          for (size_t j = 0; j < i && !done; ++j)
            if (reduces(lp_.programs[0], sq[j], lp_.programs[0].buffers[static_cast<size_t>(sq[i].a)].tensor)) {
              PInstr u = sq[i];
              sq.erase(sq.begin() + static_cast<long>(i));
              sq.insert(sq.begin() + static_cast<long>(j), u);
              out_.applied =
                  "rank 0 issues the update of " + name(lp_.programs[0], u.a) + " before its gradient is reduced";
              done = true;
            }
    if (bug == SeededBug::CollectiveOrder) done = seed_collective_order();
    if (!done) {
      out_.seed_not_applicable = true;
      out_.errors.push_back(
          "seeded bug does not apply: nothing to corrupt in this plan (needs " +
          std::string(scale                              ? "replicas"
                      : bug == SeededBug::GradientCopies ? "a replicated gradient"
                      : bug == SeededBug::CollectiveOrder
                          ? "two group collectives that another rank shares, or a send answered by a later receive"
                          : "collectives") +
          ")");
      return false;
    }
    return true;
  }

  // collective-order: a reorder of rank 0's program that is a deadlock
  // whatever the timing. Two group collectives that another rank also runs,
  // swapped: that rank issues them in program order and waits on the first
  // while rank 0 waits on the second. Without such a pair (a pure
  // pipeline): rank 0 waits for a message from a peer before its own
  // earlier send to that peer, which the peer's message answers.
  bool seed_collective_order() {
    const RankProgram& p = lp_.programs[0];
    std::vector<PInstr>& sq = lp_.programs[0].instrs;
    std::vector<size_t> colls;
    Entry e;
    for (size_t i = 0; i < sq.size(); ++i)
      if (entry_of(p, sq[i], e) && e.kind != Entry::Update && e.p2p == Entry::None) colls.push_back(i);
    for (size_t x = 0; x + 1 < colls.size(); ++x)
      for (size_t y = x + 1; y < colls.size(); ++y) {
        const PInstr &a = sq[colls[x]], &b = sq[colls[y]];
        if (same(p, a, b) || !shares_another_rank(a.group, b.group)) continue;
        out_.applied = "rank 0 issues '" + describe(p, b) + "' before '" + describe(p, a) + "'";
        std::swap(sq[colls[x]], sq[colls[y]]);
        return true;
      }
    for (size_t i = 0; i < sq.size(); ++i) {
      if (sq[i].kind != PInstr::Send) continue;
      for (size_t j = i + 1; j < sq.size(); ++j) {
        if (sq[j].kind != PInstr::Wait || sq[j].peer != sq[i].peer) continue;
        // The receive the wait completes, posted before the wait.
        size_t k = j;
        while (k-- > 0)
          if (sq[k].kind == PInstr::Recv && sq[k].b == sq[j].a) break;
        if (k >= j) break;
        out_.applied = "rank 0 waits for tag " + std::to_string(sq[j].tag) + " from rank " +
                       std::to_string(sq[j].peer) + " before its send of tag " + std::to_string(sq[i].tag) + " to it";
        PInstr recv = sq[k], wait = sq[j];
        sq.erase(sq.begin() + static_cast<long>(j));
        sq.erase(sq.begin() + static_cast<long>(k));
        size_t at = std::min(i, k);
        sq.insert(sq.begin() + static_cast<long>(at), wait);
        sq.insert(sq.begin() + static_cast<long>(at), recv);
        return true;
      }
    }
    return false;
  }

  bool shares_another_rank(int ga, int gb) const {
    if (ga < 0 || gb < 0) return false;
    const std::vector<int>& a = lp_.groups[static_cast<size_t>(ga)];
    const std::vector<int>& b = lp_.groups[static_cast<size_t>(gb)];
    for (int r : a)
      if (r != 0 && std::find(b.begin(), b.end(), r) != b.end()) return true;
    return false;
  }

  void run() {
    // Each rank's sequence read on all cores: a pass over every rank's
    // instructions (some 30 million at 1024 ranks) is bound by reading them.
    std::vector<std::vector<Entry>> seq(lp_.programs.size());
    parallel_for(lp_.programs.size(),
                 [&](size_t r) { seq[r] = entries_of(lp_.programs[r], &lp_.body(lp_.programs[r])); });
    // (A skeleton's buckets and buffers are its representative's.)
    for (const RankProgram& p : lp_.programs) world_.push_back(&lp_.body(p));
    updates_after_reductions(seq, std::vector<char>(seq.size(), 1));
    match(seq, lp_.ranks());
  }

  // The same over the world when only some programs are held (plan
  // replicas, check_order_replicas): `world[r]` is the program rank r's
  // entries `seq[r]` come from (replica 0's for a renamed rank), `own[r]`
  // whether they are its own (the update checks run on those only; a
  // renamed rank's entries are a held program's).
  void run_world(const std::vector<std::vector<Entry>>& seq, std::vector<const RankProgram*> world,
                 const std::vector<char>& own) {
    world_ = std::move(world);
    updates_after_reductions(seq, own);
    match(seq, static_cast<int>(seq.size()));
  }

 private:
  const sema::Graph& g_;
  LoweredPlan& lp_;
  ProgramCheck& out_;
  std::vector<const RankProgram*> world_;  // the program of each rank (run, run_world)

  std::string name(const RankProgram& p, int buf) const {
    return g_.tensor(p.buffers[static_cast<size_t>(buf)].tensor).name;
  }

  bool same(const RankProgram& p, const PInstr& a, const PInstr& b) const {
    Entry ea, eb;
    return entry_of(p, a, ea) && entry_of(p, b, eb) && ea == eb;
  }

  // Whether entry `e` of program `p` reduces the gradient of parameter `param`.
  bool reduces_entry(const RankProgram& p, const Entry& e, int param) const {
    if (e.kind == Entry::Bucket) {
      for (int b : p.buckets[static_cast<size_t>(e.bucket)])
        if (p.buffers[static_cast<size_t>(b)].tensor == param) return true;
      return false;
    }
    if (e.kind == Entry::Replica || e.kind == Entry::ZeroScatter) return e.param == param;
    if (e.kind == Entry::Coll)
      return lp_.comm->edges[static_cast<size_t>(e.edge)].backward &&
             lp_.comm->edges[static_cast<size_t>(e.edge)].tensor == param;
    return false;
  }
  bool reduces(const RankProgram& p, const PInstr& in, int param) const {
    Entry e;
    return entry_of(p, in, e) && reduces_entry(p, e, param);
  }

  std::string describe(const Entry& e) const {
    switch (e.kind) {
      case Entry::Coll: {
        const CommEdge& ce = lp_.comm->edges[static_cast<size_t>(e.edge)];
        return std::string(prim_name(ce.adapter.steps[static_cast<size_t>(e.step)].prim)) + " of " + edge_text(g_, ce);
      }
      case Entry::Bucket:
        return "bucketed gradient allreduce over " + group_text(lp_.groups[static_cast<size_t>(e.group)]);
      case Entry::Replica: return "replica average of the gradient of " + g_.tensor(e.param).name;
      case Entry::Loss: return "loss and gradient-norm allreduce";
      case Entry::Update: return "update of " + g_.tensor(e.param).name;
      case Entry::ZeroScatter: return "zero1 reduce-scatter of the gradient of " + g_.tensor(e.param).name;
      case Entry::ZeroGather: return "zero1 allgather of the updated shards of " + g_.tensor(e.param).name;
    }
    return "?";
  }
  std::string describe(const RankProgram& p, const PInstr& in) const {
    Entry e;
    return entry_of(p, in, e) ? describe(e) : std::string(instr_name(in.kind));
  }

  void updates_after_reductions(const std::vector<std::vector<Entry>>& seq, const std::vector<char>& own) {
    int replicas = lp_.replicas;
    for (size_t r = 0; r < seq.size(); ++r) {
      if (!own[r]) continue;
      const auto& sq = seq[r];
      std::set<int> updated;
      for (const Entry& e : sq) {
        if (e.kind == Entry::ZeroGather && !updated.count(e.param))
          out_.errors.push_back("rank " + std::to_string(r) + ": the " + describe(e) +
                                " is issued before their update");
        if (e.kind == Entry::Update)
          updated.insert(e.param);
        else
          for (int p : updated)
            if (reduces_entry(*world_[r], e, p)) {
              out_.errors.push_back("rank " + std::to_string(r) + ": the update of " + g_.tensor(p).name +
                                    " is issued before its gradient is reduced (" + describe(e) + ")");
              updated.erase(p);
              break;
            }
        if (e.kind == Entry::Replica && std::fabs(e.scale * replicas - 1.0) > 1e-6)
          out_.errors.push_back("rank " + std::to_string(r) + ": the gradient of " + g_.tensor(e.param).name +
                                " is scaled by " + std::to_string(e.scale) + " but by 1/" + std::to_string(replicas) +
                                " on the other replicas");
      }
    }
  }

  void match(const std::vector<std::vector<Entry>>& seq, int world) {
    // Worklist: a rank is looked at again only when it has advanced.
    std::vector<size_t> pos(static_cast<size_t>(world), 0);
    std::set<std::tuple<int, int, uint32_t>> sent, received;       // (from, to, tag) posted
    std::map<std::pair<int, uint32_t>, std::vector<int>> waiting;  // (sender, tag) -> ranks waiting on it
    auto next_coll = [&](int r) -> const Entry* {
      const auto& sq = seq[static_cast<size_t>(r)];
      while (pos[r] < sq.size() && sq[pos[r]].kind == Entry::Update) ++pos[r];
      return pos[r] < sq.size() ? &sq[pos[r]] : nullptr;
    };
    std::vector<size_t> ready(lp_.groups.size(), 0);  // per group: leading members at entry ready_at
    std::vector<Entry> ready_at(lp_.groups.size());
    std::vector<int> work;
    for (int r = world - 1; r >= 0; --r) work.push_back(r);
    while (!work.empty()) {
      sema::CheckDeadline::poll();
      int r = work.back();
      work.pop_back();
      const Entry* e = next_coll(r);
      if (!e) continue;
      if (e->p2p == Entry::SendPost) {
        sent.insert({r, e->peer, e->tag});
        ++pos[r];
        work.push_back(r);
        if (auto it = waiting.find({r, e->tag}); it != waiting.end()) {
          for (int x : it->second) work.push_back(x);
          waiting.erase(it);
        }
        continue;
      }
      if (e->p2p == Entry::RecvPost) {
        if (!received.insert({e->peer, r, e->tag}).second)
          out_.errors.push_back("rank " + std::to_string(r) + " posts two receives of tag " + std::to_string(e->tag) +
                                " from rank " + std::to_string(e->peer));
        ++pos[r];
        ++out_.collectives;
        work.push_back(r);
        continue;
      }
      if (e->p2p == Entry::RecvWait) {
        if (!received.count({e->peer, r, e->tag})) {
          out_.errors.push_back("rank " + std::to_string(r) + " waits for tag " + std::to_string(e->tag) +
                                " from rank " + std::to_string(e->peer) + " before posting its receive");
          return;
        }
        if (!sent.count({e->peer, r, e->tag})) {
          waiting[{e->peer, e->tag}].push_back(r);
          continue;
        }
        ++pos[r];
        work.push_back(r);
        continue;
      }
      const size_t gi = static_cast<size_t>(e->group);
      const std::vector<int>& m = lp_.groups[gi];
      // Members found waiting at this entry stay there until it completes
      // (an entry names its group, so no other collective moves them): the
      // scan resumes after them. Each arrival scanning the group from its
      // first member made a 1024-rank collective cost 1024 x 1024 / 2.
      size_t k = ready[gi] > 0 && ready_at[gi] == *e ? ready[gi] : 0;
      for (; k < m.size(); ++k) {
        const Entry* o = next_coll(m[k]);
        if (!o || !(*o == *e)) break;
      }
      ready[gi] = k;
      ready_at[gi] = *e;
      if (k < m.size()) continue;
      ready[gi] = 0;
      for (int x : m) ++pos[x];
      ++out_.collectives;
      for (int x : m) work.push_back(x);
    }
    // Every send is received (else it never completes and the step hangs).
    for (const auto& [from, to, tag] : sent)
      if (!received.count({from, to, tag}))
        out_.errors.push_back("rank " + std::to_string(from) + " sends tag " + std::to_string(tag) + " to rank " +
                              std::to_string(to) + ", which never receives it");
    std::string msg;
    int shown = 0;
    for (int r = 0; r < world && shown < 4; ++r)
      if (const Entry* e = next_coll(r)) {
        msg += e->p2p == Entry::RecvWait
                   ? " rank " + std::to_string(r) + " waits for the " + describe(*e) + " from rank " +
                         std::to_string(e->peer) + " (tag " + std::to_string(e->tag) + ");"
                   : " rank " + std::to_string(r) + " on the " + describe(*e) + " over " +
                         group_text(lp_.groups[static_cast<size_t>(e->group)]) + ";";
        ++shown;
      }
    if (!msg.empty()) out_.errors.push_back("deadlock: the ranks wait on different collectives:" + msg);
  }
};

}  // namespace

void check_order(const sema::Graph& g, LoweredPlan& lp, SeededBug bug, ProgramCheck& out) {
  OrderCheck order(g, lp, out);
  if (!order.seed(bug)) return;
  order.run();
}

void check_order_replicas(const sema::Graph& g, LoweredPlan& lp0, const std::vector<HeldProgram>& held, SeededBug bug,
                          ProgramCheck& out) {
  const int k = lp0.devices, world = lp0.ranks();
  // Replica 0's sequences before the seeded bug touches them: the other
  // replicas run the programs lowering made, not the corrupted ones.
  std::vector<std::vector<Entry>> base;
  for (const RankProgram& p : lp0.programs) base.push_back(entries_of(p));
  OrderCheck order(g, lp0, out);
  if (!order.seed(bug)) return;
  // Groups by their ranks, so that a renamed or held program's group gets
  // the id replica 0's table (extended) gives the same ranks.
  std::map<std::vector<int>, int> ids;
  for (size_t i = 0; i < lp0.groups.size(); ++i) ids.emplace(lp0.groups[i], static_cast<int>(i));
  auto intern = [&](const std::vector<int>& m) {
    auto [it, fresh] = ids.emplace(m, static_cast<int>(lp0.groups.size()));
    if (fresh) lp0.groups.push_back(m);
    return it->second;
  };
  std::vector<std::vector<Entry>> seq(static_cast<size_t>(world));
  std::vector<const RankProgram*> programs(static_cast<size_t>(world), nullptr);
  std::vector<char> own(static_cast<size_t>(world), 0);
  for (int d = 0; d < k; ++d) {
    seq[static_cast<size_t>(d)] = entries_of(lp0.programs[static_cast<size_t>(d)]);
    programs[static_cast<size_t>(d)] = &lp0.programs[static_cast<size_t>(d)];
    own[static_cast<size_t>(d)] = 1;
  }
  const size_t base_groups = lp0.groups.size();
  for (int r = 1; r * k < world; ++r) {
    // Replica 0's groups inside it, moved to replica r (ids made once per replica).
    std::vector<int> moved(base_groups, -1);
    auto rename = [&](int gid) {
      const std::vector<int>& m = lp0.groups[static_cast<size_t>(gid)];
      if (std::any_of(m.begin(), m.end(), [&](int x) { return x >= k; })) return gid;  // spans replicas: the same ranks
      if (moved[static_cast<size_t>(gid)] < 0) {
        std::vector<int> shifted(m);
        for (int& x : shifted) x += r * k;
        moved[static_cast<size_t>(gid)] = intern(shifted);
      }
      return moved[static_cast<size_t>(gid)];
    };
    for (int d = 0; d < k; ++d) {
      std::vector<Entry> s = base[static_cast<size_t>(d)];
      for (Entry& e : s) {
        if (e.group >= 0 && static_cast<size_t>(e.group) < base_groups) e.group = rename(e.group);
        if (e.peer >= 0 && e.peer < k) e.peer += r * k;
      }
      seq[static_cast<size_t>(r * k + d)] = std::move(s);
      programs[static_cast<size_t>(r * k + d)] = &lp0.programs[static_cast<size_t>(d)];
    }
  }
  for (const HeldProgram& h : held) {
    std::vector<Entry> s = entries_of(*h.program);
    for (Entry& e : s)
      if (e.group >= 0) e.group = intern((*h.groups)[static_cast<size_t>(e.group)]);
    seq[static_cast<size_t>(h.program->rank)] = std::move(s);
    programs[static_cast<size_t>(h.program->rank)] = h.program;
    own[static_cast<size_t>(h.program->rank)] = 1;
  }
  order.run_world(seq, std::move(programs), own);
}

}  // namespace nns::backend::detail
