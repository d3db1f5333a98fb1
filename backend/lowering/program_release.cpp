// Program verification of early send releases (program_order.h): a Send
// that names a release point (PInstr::index, lower_releases.cpp) lets its
// rank free the buffer at its Wait on the peer's message of that tag. That
// is sound only when the peer sends that message after its own Wait on
// ours: then its arrival proves ours arrived. The check reads both
// programs; lowering derived the point from one rank's list and a claim
// about every schedule, which this turns into a fact or a diagnosis.
#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/lowering/parallel.h"
#include "backend/lowering/program_order.h"
#include "semantics/check_deadline.h"

namespace nns::backend::detail {

namespace {

uint64_t key(int peer, uint32_t tag) { return (static_cast<uint64_t>(static_cast<uint32_t>(peer)) << 32) | tag; }

// Where a program posts each Send and runs each Wait, by (peer, tag):
// sorted vectors (a 64-rank plan replica of the 145.6B row holds some
// millions of them; hash maps cost several times the bytes).
struct P2PIndex {
  using Entry = std::pair<uint64_t, size_t>;  // (key, instruction)
  std::vector<Entry> send, wait;
  explicit P2PIndex(const RankProgram& p) {
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      // (A skeleton's instructions at their places in the whole program.)
      const PInstr& in = p.instrs[i];
      if (in.kind == PInstr::Send)
        send.emplace_back(key(in.peer, in.tag), p.place(i));
      else if (in.kind == PInstr::Wait)
        wait.emplace_back(key(in.peer, in.tag), p.place(i));
    }
    std::sort(send.begin(), send.end());
    std::sort(wait.begin(), wait.end());
  }
  // The first instruction of `list` with key k; npos when none.
  static size_t find(const std::vector<Entry>& list, uint64_t k) {
    auto it = std::lower_bound(list.begin(), list.end(), Entry{k, 0});
    return it != list.end() && it->first == k ? it->second : npos;
  }
  static constexpr size_t npos = static_cast<size_t>(-1);
};

// `body`: the program holding p's buffers (LoweredPlan::body).
std::string send_text(const sema::Graph& g, const RankProgram& p, const RankProgram& body, const PInstr& s) {
  const BufferDecl& d = body.buffers[static_cast<size_t>(s.a)];
  std::string t = "rank " + std::to_string(p.rank) + " releases its send of tag " + std::to_string(s.tag) +
                  " to rank " + std::to_string(s.peer) + " (b" + std::to_string(s.a) + ", " +
                  (g.tensor(d.tensor).kind == sema::TensorKind::Activation ? "%" + std::to_string(d.tensor)
                                                                           : g.tensor(d.tensor).name);
  if (d.mb >= 0) t += ", mb" + std::to_string(d.mb);
  return t + ") at its wait for tag " + std::to_string(s.index);
}

// The programs of `lp` by rank (null: not held here).
std::vector<const RankProgram*> by_rank(const LoweredPlan& lp) {
  std::vector<const RankProgram*> out(static_cast<size_t>(lp.ranks()), nullptr);
  for (const RankProgram& p : lp.programs)
    if (p.rank >= 0 && p.rank < lp.ranks()) out[static_cast<size_t>(p.rank)] = &p;
  return out;
}

}  // namespace

void check_send_releases(const sema::Graph& g, const LoweredPlan& lp, std::vector<std::string>& errors,
                         size_t max_errors) {
  const std::vector<const RankProgram*> prog = by_rank(lp);
  // A peer's index is built by the first program that needs it.
  std::vector<std::unique_ptr<P2PIndex>> index(prog.size());
  std::vector<std::once_flag> built(prog.size());
  auto index_of = [&](int r) -> const P2PIndex& {
    std::call_once(built[static_cast<size_t>(r)],
                   [&] { index[static_cast<size_t>(r)] = std::make_unique<P2PIndex>(*prog[static_cast<size_t>(r)]); });
    return *index[static_cast<size_t>(r)];
  };
  // Each program on all cores into its own list (capped as a serial run
  // would cap it), appended in program order up to the budget: the serial
  // output.
  std::vector<std::vector<std::string>> found(lp.programs.size());
  parallel_for(lp.programs.size(), [&](size_t k) {
    sema::CheckDeadline::poll();
    const RankProgram& p = lp.programs[k];
    for (const PInstr& s : p.instrs) {
      if (s.kind != PInstr::Send || s.index < 0) continue;
      // A peer in another plan replica's programs is checked where those are held.
      if (s.peer < 0 || s.peer >= static_cast<int>(prog.size()) || !prog[static_cast<size_t>(s.peer)]) continue;
      const P2PIndex& q = index_of(s.peer);
      const size_t waits = P2PIndex::find(q.wait, key(p.rank, s.tag));
      const size_t sends = P2PIndex::find(q.send, key(p.rank, static_cast<uint32_t>(s.index)));
      std::string why;
      if (sends == P2PIndex::npos) {
        why = ", which rank " + std::to_string(s.peer) + " never sends to it";
      } else if (waits != P2PIndex::npos && sends < waits) {
        why = ", but rank " + std::to_string(s.peer) + " sends tag " + std::to_string(s.index) + " (instruction " +
              std::to_string(sends) + ") before it waits for tag " + std::to_string(s.tag) + " (instruction " +
              std::to_string(waits) + "): the send may still be in flight when its buffer is freed";
      }
      if (why.empty()) continue;
      found[k].push_back(send_text(g, p, lp.body(p), s) + why);
      if (found[k].size() >= max_errors) return;
    }
  });
  size_t taken = 0;
  for (const std::vector<std::string>& f : found)
    for (const std::string& e : f) {
      if (taken++ >= max_errors) return;
      errors.push_back(e);
    }
}

bool seed_early_release(const sema::Graph& g, LoweredPlan& lp, std::string& applied) {
  // (Rank 0 is never a skeleton: device 0 represents its orbit.)
  if (lp.programs.empty() || lp.programs.front().moved_from >= 0) return false;
  const std::vector<const RankProgram*> prog = by_rank(lp);
  RankProgram& p = lp.programs.front();
  std::unordered_map<int, std::unique_ptr<P2PIndex>> peers;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    PInstr& s = p.instrs[i];
    if (s.kind != PInstr::Send || s.peer < 0 || s.peer >= static_cast<int>(prog.size()) ||
        !prog[static_cast<size_t>(s.peer)])
      continue;
    std::unique_ptr<P2PIndex>& q = peers[s.peer];
    if (!q) q = std::make_unique<P2PIndex>(*prog[static_cast<size_t>(s.peer)]);
    const size_t waits = P2PIndex::find(q->wait, key(p.rank, s.tag));
    if (waits == P2PIndex::npos) continue;
    // The first of this rank's later waits on the peer whose message the
    // peer sends before it has waited for ours.
    for (size_t j = i + 1; j < p.instrs.size(); ++j) {
      const PInstr& w = p.instrs[j];
      if (w.kind != PInstr::Wait || w.peer != s.peer) continue;
      const size_t sends = P2PIndex::find(q->send, key(p.rank, w.tag));
      if (sends == P2PIndex::npos || sends > waits) continue;
      s.index = static_cast<int>(w.tag);
      applied = send_text(g, p, p, s) + " (rank " + std::to_string(s.peer) + " sends that before it receives ours)";
      return true;
    }
  }
  return false;
}

}  // namespace nns::backend::detail
