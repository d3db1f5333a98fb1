// plan_text: a search candidate as an ordinary `plan` block (search.h,
// step 4). The block is data plus one generic loop: a rule list (op name
// pattern -> the input dim it splits, parts per device, recomputed alone),
// the stages as op lists, and per op: split along the batch over the DP
// groups, then over the TP group by its rule (or replicated in the group).
#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

#include "backend/planner/search.h"

namespace nns::planner {

namespace {

bool glob(const char* p, const char* s) {
  if (!*p) return !*s;
  if (*p == '*') return glob(p + 1, s) || (*s && glob(p, s + 1));
  if (*s && (*p == '?' || *p == *s)) return glob(p + 1, s + 1);
  return false;
}

// The layer indices of `name` replaced by '*' (or by one '?' per digit,
// which cannot reach across a dot): all of them (last_only = false) or the
// last one.
std::string generalise(const std::string& name, bool last_only, bool star) {
  std::vector<std::pair<size_t, size_t>> runs;  // digit runs between dots
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] != '.' || !std::isdigit(static_cast<unsigned char>(name[i + 1]))) continue;
    size_t j = i + 1;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j < name.size() && name[j] == '.') runs.push_back({i + 1, j});
  }
  if (name.size() && std::isdigit(static_cast<unsigned char>(name[0]))) return name;
  std::string out = name;
  for (size_t r = runs.size(); r-- > 0;) {
    if (last_only && r + 1 != runs.size()) break;
    out.replace(runs[r].first, runs[r].second - runs[r].first,
                star ? std::string("*") : std::string(runs[r].second - runs[r].first, '?'));
  }
  return out;
}

std::string quote(const std::string& s) { return "\"" + s + "\""; }

// A unit's ops as select() patterns: its layer's pattern, or its ops' names.
std::string unit_patterns(const SearchModel& m, const SearchUnit& u) {
  if (!u.select.empty()) return quote(u.select);
  std::string s;
  for (int i : u.ops) s += (s.empty() ? "" : ", ") + quote(m.ops[i].name);
  return s;
}

// Selective recompute: one recompute() call per attention op (two in one
// call that followed each other would form one region), over patterns
// that name only the score cores it recomputes.
std::string selective_text(const SearchModel& m, const Candidate& c) {
  std::vector<std::string> cores;
  for (size_t i = 0; i < m.ops.size(); ++i)
    if (m.ops[i].score_core && c.ops[i].rc && c.ops[i].k == 1) cores.push_back(m.ops[i].name);
  std::vector<std::string> pats;
  for (const std::string& n : cores) {
    const std::string p = generalise(n, false, true);
    bool all = true;
    for (const SearchOp& op : m.ops)
      if (glob(p.c_str(), op.name.c_str())) all = all && std::find(cores.begin(), cores.end(), op.name) != cores.end();
    const std::string q = quote(all ? p : n);
    if (std::find(pats.begin(), pats.end(), q) == pats.end()) pats.push_back(q);
  }
  std::ostringstream o;
  o << "  # Selective recompute: each attention op (its [seq, seq] scores) recomputed\n"
       "  # alone; the rest of each layer keeps its values.\n";
  o << "  for op in ops_of([";
  for (size_t i = 0; i < pats.size(); ++i) o << (i ? ", " : "") << pats[i];
  o << "]) {\n    recompute(op)\n  }\n";
  return o.str();
}

}  // namespace

std::string plan_text(const SearchModel& m, const Candidate& c, const std::string& name) {
  std::ostringstream o;
  auto same = [&](const OpDecision& a, const OpDecision& b, int ia, int ib) {
    if ((a.choice < 0) != (b.choice < 0)) return false;
    if (a.choice < 0) return true;
    const SearchChoice& x = m.ops[ia].choices[a.choice];
    const SearchChoice& y = m.ops[ib].choices[b.choice];
    return x.idx == y.idx && x.dim == y.dim && a.k == b.k && a.rc == b.rc;
  };
  // Rules: one pattern per group of ops that decide alike.
  std::vector<std::string> rules;
  std::vector<bool> covered(m.ops.size(), false);
  for (size_t i = 0; i < m.ops.size(); ++i) {
    if (covered[i] || c.ops[i].choice < 0) continue;
    std::string pat;
    for (int level = 0; level < 5 && pat.empty(); ++level) {
      std::string p = level == 4 ? m.ops[i].name : generalise(m.ops[i].name, level >= 2, level % 2 == 0);
      bool ok = true;
      std::vector<size_t> hits;
      for (size_t j = 0; j < m.ops.size() && ok; ++j)
        if (glob(p.c_str(), m.ops[j].name.c_str())) {
          ok = same(c.ops[i], c.ops[j], static_cast<int>(i), static_cast<int>(j));
          hits.push_back(j);
        }
      if (ok) {
        pat = p;
        for (size_t j : hits) covered[j] = true;
      }
    }
    const SearchChoice& ch = m.ops[i].choices[c.ops[i].choice];
    // A score core one piece per device under selective recompute is
    // recomputed by its own call below, whatever its split.
    const bool rc = c.ops[i].rc && !(c.selective && m.ops[i].score_core && c.ops[i].k == 1);
    rules.push_back("[" + quote(pat) + ", " + std::to_string(ch.idx) + ", " + std::to_string(ch.dim) + ", " +
                    std::to_string(c.ops[i].k) + ", " + (rc ? "true" : "false") + "]");
  }
  o << "# Found by `nns plan`: " << c.describe() << ".\n";
  if (c.replicas)
    o << "# Its data parallelism is " << c.dp << " replicas of this plan (" << c.plan_devices()
      << (c.plan_devices() == 1 ? " device" : " devices") << " each): --gpus " << c.plan_devices() * c.dp
      << " --plan-gpus " << c.plan_devices() << "."
      << (c.zero1 ? " Its zero1 is the distributed optimizer over the replicas (nns run, simulate\n"
                    "# and check --distributed-optimizer)."
                  : "")
      << "\n";
  o << "plan " << name << "(ngpus) {\n";
  // With replicas the plan's own dp is 1: each replica runs the plan on its
  // own micro-batches (the config's batch is one replica's).
  o << "  let pp = " << c.pp << "\n  let tp = " << c.tp
    << "\n  let dp = " << (c.replicas ? "1   # the data parallelism is plan replicas (above)" : std::to_string(c.dp))
    << "\n";
  const bool inter = c.vp > 1;  // interleaved 1F1B: pp x vp stages, stage c on rank c % pp
  if (inter) o << "  let vp = " << c.vp << "   # pipeline chunks per rank (interleaved 1F1B)\n";
  o << "  assert(ngpus == pp * tp * dp, \"plan " << name << " was found for \" + str(pp * tp * dp) + \" devices\")\n";
  o << "  # [op pattern, input, its dim, parts per device, recomputed alone]: the op is split\n"
       "  # into tp * parts pieces inside its tensor-parallel group; ops no rule names\n"
       "  # are replicated in the group. Every op is first split along its batch\n"
       "  # over the dp groups (ops without a batch are replicated on the stage).\n";
  o << "  let rules = [";
  for (size_t i = 0; i < rules.size(); ++i) o << (i ? ",\n    " : "\n    ") << rules[i];
  o << (rules.empty() ? "]\n" : "\n  ]\n");
  // Stages: the units of each, in order, as select() patterns (a list
  // literal, not a chain of `+`, so a stage of thousands of ops evaluates).
  o << "  fn ops_of(patterns) {\n"
       "    let ops = []\n"
       "    for p in patterns {\n"
       "      ops = ops + select(p)\n"
       "    }\n"
       "    return ops\n"
       "  }\n";
  o << "  let stages = [";
  for (int st = 0; st < c.pp * c.vp; ++st) {
    std::string pats;
    for (size_t u = 0; u < m.units.size(); ++u)
      if (c.unit_stage[u] == st) pats += (pats.empty() ? "" : ",\n      ") + unit_patterns(m, m.units[u]);
    o << (st ? ",\n    " : "\n    ") << "ops_of([" << pats << "])";
  }
  o << "\n  ]\n";
  if (inter)
    o << "  # Stage c (a chunk) runs on the devices of pipeline rank s = c % pp.\n"
         "  for c in 0..pp * vp {\n"
         "    let s = c % pp\n"
         "    for op in stages[c] {\n";
  else
    o << "  for s in 0..pp {\n"
         "    for op in stages[s] {\n";
  o << "      let rule = none\n"
       "      for r in rules {\n"
       "        if rule == none and matches(op, r[0]) {\n"
       "          rule = r\n"
       "        }\n"
       "      }\n"
       "      let groups = [op]\n"
       "      if dp > 1 {\n"
       "        if not splittable(op, \"batch\", dp) {\n"
       "          replicate(op, [s * dp * tp + j for j in 0..dp * tp])\n"
       "          continue\n"
       "        }\n"
       "        groups = trans(op, dim = \"batch\", num = dp)\n"
       "      }\n"
       "      for g in 0..len(groups) {\n"
       "        let devs = [s * dp * tp + g * tp + j for j in 0..tp]\n"
       "        if rule == none {\n"
       "          if tp == 1 {\n"
       "            assign(groups[g], devs[0])\n"
       "          } else {\n"
       "            replicate(groups[g], devs)\n"
       "          }\n"
       "        } else {\n"
       "          let n = tp * rule[3]\n"
       "          let parts = trans(groups[g], idx = rule[1], dim = rule[2], num = n)\n"
       "          for i in 0..n {\n"
       "            assign(parts[i], devs[i // rule[3]])\n"
       "          }\n"
       "          if rule[4] {\n"
       "            recompute(parts)\n"
       "          }\n"
       "        }\n"
       "      }\n"
       "    }\n"
       "  }\n";
  if (c.recompute) {
    o << "  # Activation checkpointing: each unit (a layer, or the ops between layers)\n  # keeps only its inputs.\n";
    for (const SearchUnit& u : m.units) o << "  recompute(ops_of([" << unit_patterns(m, u) << "]))\n";
  }
  if (c.selective) o << selective_text(m, c);
  if (c.zero1 && !c.replicas) o << "  zero1()\n";
  if (inter)
    o << "  schedule(\"interleaved\", stages, v = vp)\n";
  else if (c.pp > 1)
    o << "  schedule(\"1f1b\", stages)\n";
  o << "}\n";
  return o.str();
}

}  // namespace nns::planner
