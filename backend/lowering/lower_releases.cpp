// Where a sent buffer is released (the frees pass, lower_frees.cpp): a Send
// is asynchronous, so a Free before the send is known complete parks the
// buffer. Without more knowledge it stays parked until the step's end; in a
// pipeline that keeps every activation a stage sends allocated for the
// whole step. The release point is a later Wait of the sender on a message
// the peer sends only after its own Wait on ours: once that message has
// arrived, the peer had received ours, so our send is complete.
//
// The message chosen is the gradient of the same tensor and micro-batch
// coming back from the same peer. It is derived from this rank's program
// alone (no other rank's list is needed, so a rank lowering only itself
// makes the same choice), and it holds in every schedule: the peer sends
// that gradient from the backward of the micro-batch, which on any device
// follows every forward task of the micro-batch (the backward depends on
// the loss, which depends on every forward), and the peer's Wait on our
// activation sits in a forward task, before the activation's first read.
// Program verification (program_release.cpp) checks it on every pair of
// programs all the same: an assumption here is a diagnosis there.
#include <map>
#include <tuple>

#include "backend/lowering/lower_internal.h"

namespace nns::backend::detail {

void mark_send_releases(RankBuild& R) {
  const std::vector<CommEdge>& edges = R.A.cp.edges;
  auto edge = [&](const PInstr& in) -> const CommEdge* {
    return in.edge >= 0 && static_cast<size_t>(in.edge) < edges.size() ? &edges[static_cast<size_t>(in.edge)] : nullptr;
  };
  // Forward sends not yet released, by (peer, tensor, micro-batch).
  std::map<std::tuple<int, int, int>, std::vector<size_t>> open;
  for (size_t i = 0; i < R.P.instrs.size(); ++i) {
    PInstr& in = R.P.instrs[i];
    const CommEdge* e = edge(in);
    if (!e) continue;
    if (in.kind == PInstr::Send) {
      in.index = -1;
      // A parameter's transfer (per step) is read by every micro-batch;
      // its gradient comes back once, in the last: nothing to pair.
      if (!e->backward && !e->per_step) open[{in.peer, e->tensor, in.mb}].push_back(i);
    } else if (in.kind == PInstr::Wait && e->backward && !open.empty()) {
      auto it = open.find({in.peer, e->tensor, in.mb});
      if (it == open.end()) continue;
      for (size_t s : it->second) R.P.instrs[s].index = static_cast<int>(in.tag);
      open.erase(it);
    }
  }
}

}  // namespace nns::backend::detail
