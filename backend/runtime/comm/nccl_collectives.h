// The plan executor's collectives on NCCL (collectives.h's device path):
// device pointers of the CUDA backend, no host staging. Built with nns_nccl.
//
// Ordering, with no host or device-wide synchronisation:
//   - before an operation reads a buffer, the collective stream (or the
//     pipeline channel's stream) waits for the work the backend's compute
//     stream has queued so far (an event);
//   - an in-order operation makes the compute stream wait for it at once;
//     a posted one (post_allreduce, post_send, post_recv) when its
//     PendingCollective::wait() runs, which the executor calls at the first
//     instruction touching the result (PendingTable), so the bucketed
//     gradient allreduce runs beside the rest of the backward;
//   - the backend frees and reuses memory in compute-stream order, after
//     those waits, so a buffer is never reused while NCCL still reads it.
//
// Pipeline transfers go over NcclCommunicator channels (a communicator and
// a stream per directed pair). NCCL matches a channel's transfers in the
// order they are queued, where the host path matches by tag: the factory
// checks that this rank posts each channel's transfers in ascending tag
// order (then both ends queue them in the same order); interleaved
// pipeline schedules do not (their chunks' transfers cross), and then the
// run takes the host path or is refused (make_nccl_collectives).
#pragma once

#include <chrono>
#include <memory>

#include "backend/runtime/collectives.h"

namespace nns::backend {

class Communicator;
struct LoweredPlan;

// Collective over every rank of `host`: joins NCCL on CUDA device `device`
// (the backend's), creates every group of the run (the union of all ranks'
// groups, gathered through `host`) and the pipeline channels. `be` must be
// the CUDA backend (a native stream). Where some rank posts a channel's
// transfers out of tag order, every rank learns it before anything waits:
// with `host_fallback` all take the host path (Gloo, staged) and `note`
// says why; without it RuntimeError says why NCCL cannot carry the plan.
std::unique_ptr<Collectives> make_nccl_collectives(Communicator& host, Backend& be, int device, const LoweredPlan& plan,
                                                   std::chrono::milliseconds timeout, bool host_fallback = false,
                                                   std::string* note = nullptr);

}  // namespace nns::backend
