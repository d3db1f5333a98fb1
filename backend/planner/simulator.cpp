#include "backend/planner/simulator.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace nns::planner {

using backend::PInstr;
using backend::RankProgram;

namespace {

using MsgKey = std::tuple<int, int, uint32_t>;  // sender, receiver, tag

struct Msg {
  double start = 0, arrival = 0;
};

struct RankState {
  size_t pc = 0;
  double clock = 0;
  std::map<int, MsgKey> posted;  // Recv buffer -> the message it waits for
  std::map<int, int> group_seq;  // collectives issued per group
  bool arrived = false;          // waiting at a collective
};

}  // namespace

bool simulate(const backend::LoweredPlan& lp, const InstrCost& cost, SimResult& out, std::string& err) {
  const size_t n = lp.programs.size();
  out = SimResult{};
  out.ranks.assign(n, RankTimes{});
  std::vector<RankState> st(n);
  std::map<MsgKey, Msg> sent;
  // Members waiting at the k-th collective of a group: (group, k) -> arrivals by rank.
  std::map<std::pair<int, int>, std::map<int, double>> meeting;
  // Global rank -> index into lp.programs (a rank lowering may hold one program).
  std::map<int, size_t> index_of;
  for (size_t i = 0; i < n; ++i) index_of[lp.programs[i].rank] = i;

  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t r = 0; r < n; ++r) {
      const RankProgram& prog = lp.programs[r];
      RankState& s = st[r];
      RankTimes& t = out.ranks[r];
      while (s.pc < prog.instrs.size()) {
        const PInstr& in = prog.instrs[s.pc];
        if (in.kind == PInstr::Send) {
          double c = cost(prog, in);
          sent[{prog.rank, in.peer, in.tag}] = Msg{s.clock, s.clock + c};
        } else if (in.kind == PInstr::Recv) {
          s.posted[in.b] = MsgKey{in.peer, prog.rank, in.tag};
        } else if (in.kind == PInstr::Wait) {
          auto p = s.posted.find(in.a);
          if (p == s.posted.end()) {
            err = "rank " + std::to_string(prog.rank) + ": Wait on a buffer with no posted Recv";
            return false;
          }
          auto m = sent.find(p->second);
          if (m == sent.end()) break;  // the sender has not reached its Send yet
          double start = std::max(s.clock, m->second.start);
          if (m->second.arrival > s.clock) {
            t.bubble += start - s.clock;
            t.exposed_comm += m->second.arrival - start;
            s.clock = m->second.arrival;
          }
          s.posted.erase(p);
        } else if (in.is_collective() && in.group >= 0) {
          const std::vector<int>& members = lp.groups.at(static_cast<size_t>(in.group));
          auto key = std::make_pair(in.group, s.group_seq[in.group]);
          auto& arrivals = meeting[key];
          if (!s.arrived) {
            arrivals[prog.rank] = s.clock;
            s.arrived = true;
          }
          // Members this simulation does not hold (a partial lowering) are taken as on time.
          bool all = true;
          double start = 0;
          for (int m : members) {
            if (!index_of.count(m)) continue;
            auto a = arrivals.find(m);
            if (a == arrivals.end()) { all = false; break; }
            start = std::max(start, a->second);
          }
          if (!all) break;
          double c = cost(prog, in);
          t.bubble += start - s.clock;
          t.exposed_comm += c;
          s.clock = start + c;
          s.arrived = false;
          ++s.group_seq[in.group];
        } else {
          double c = cost(prog, in);
          t.busy += c;
          s.clock += c;
        }
        ++s.pc;
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (st[r].pc < lp.programs[r].instrs.size()) {
      err = "rank " + std::to_string(lp.programs[r].rank) + " blocks forever at instruction " +
            std::to_string(st[r].pc) + " (" + backend::instr_name(lp.programs[r].instrs[st[r].pc].kind) + ")";
      return false;
    }
    out.ranks[r].end = st[r].clock;
    out.step_time = std::max(out.step_time, st[r].clock);
  }
  return true;
}

}  // namespace nns::planner
