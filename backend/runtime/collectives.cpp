#include "backend/runtime/collectives.h"

#include <algorithm>

#include "backend/lowering/rank_program.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/group_worker.h"
#include "backend/runtime/cpu/kernels.h"  // round_to_bf16

namespace nns::backend {

namespace {

// grad_reduce = "bf16": a gradient about to be summed over ranks is rounded
// to bfloat16 first, the numerics of a bf16 reduction. There is no bf16 wire
// format yet: the rounded values travel and add up in fp32.
void round_bf16(float* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = cpu::round_to_bf16(p[i]);
}

// A buffer as the host Communicator sees it: host floats. That is the
// buffer's own memory when the backend's memory is the host's; otherwise a
// host copy, staged in before the operation (`read`) and back after it
// (written()), both counted.
struct HostSide {
  Backend& be;
  Collectives& c;
  bool stage;
  void* dev;
  size_t n;
  std::vector<float> copy;
  float* p;
  HostSide(Backend& b, Collectives& owner, bool staged, const void* d, int64_t count, bool read)
      : be(b), c(owner), stage(staged), dev(const_cast<void*>(d)), n(static_cast<size_t>(count)) {
    if (!stage) {
      p = static_cast<float*>(dev);
      return;
    }
    copy.resize(n);
    p = copy.data();
    if (read) {
      be.copy_to_host(p, d, n * 4);
      c.staged_to_host += static_cast<int64_t>(n * 4);
    }
  }
  void written() {
    if (!stage) return;
    be.copy_from_host(dev, p, n * 4);
    c.staged_to_device += static_cast<int64_t>(n * 4);
  }
};

// An operation the host finished inside the post.
struct Done : PendingCollective {
  void wait() override {}
};

// An allreduce running on its group's thread.
struct Posted : PendingCollective {
  explicit Posted(std::shared_ptr<GroupWorkers::Ticket> t) : ticket(std::move(t)) {}
  ~Posted() override {
    try {
      ticket->wait();  // the buffer must outlive the operation
    } catch (...) {}
  }
  void wait() override { ticket->wait(); }
  std::shared_ptr<GroupWorkers::Ticket> ticket;
};

// A Gloo point-to-point transfer: the request, and for a receive the
// staged copy written back to backend memory when it has arrived.
struct HostTransfer : PendingCollective {
  std::unique_ptr<HostSide> host;  // declared first: the request (which waits when destroyed) goes before it
  std::unique_ptr<Communicator::Request> req;
  bool receive = false, finished = false;
  void wait() override {
    if (finished) return;
    req->wait();
    if (receive) host->written();
    finished = true;
  }
};

class HostCollectives : public Collectives {
 public:
  HostCollectives(Communicator* comm, Backend& be, bool stage) : comm_(comm), be_(be), stage_(stage) {}
  std::string name() const override { return "gloo"; }
  int rank() const override { return comm_ ? comm_->rank() : 0; }
  int size() const override { return comm_ ? comm_->size() : 1; }
  void connect_peer(int peer) override {
    if (comm_) comm_->connect_peer(peer);
  }

  void allreduce(void* buf, int64_t count, const Group& group, bool round) override {
    workers_.drain(group);
    HostSide h(be_, *this, stage_, buf, count, true);
    if (round) round_bf16(h.p, h.n);
    world().allreduce(h.p, h.n, group);
    h.written();
  }
  void allgather(const void* in, void* out, int64_t chunk, const Group& group) override {
    workers_.drain(group);
    HostSide hin(be_, *this, stage_, in, chunk, true), hout(be_, *this, stage_, out, chunk * static_cast<int64_t>(group.size()), false);
    world().allgather(hin.p, hout.p, static_cast<size_t>(chunk), group);
    hout.written();
  }
  void reduce_scatter(void* in, void* out, int64_t chunk, const Group& group, bool round) override {
    workers_.drain(group);
    HostSide hin(be_, *this, stage_, in, chunk * static_cast<int64_t>(group.size()), true), hout(be_, *this, stage_, out, chunk, false);
    if (round) round_bf16(hin.p, hin.n);
    world().reduce_scatter(hin.p, hout.p, static_cast<size_t>(chunk), group);
    hout.written();
  }
  void all_to_all(const void* in, void* out, int64_t chunk, const Group& group) override {
    workers_.drain(group);
    const int64_t n = chunk * static_cast<int64_t>(group.size());
    HostSide hin(be_, *this, stage_, in, n, true), hout(be_, *this, stage_, out, n, false);
    world().all_to_all(hin.p, hout.p, static_cast<size_t>(chunk), group);
    hout.written();
  }
  // On host memory the allreduce runs on the group's own thread
  // (group_worker.h), overlapping what the caller does until its wait();
  // a staged buffer (device memory) is reduced here, before the post returns.
  std::unique_ptr<PendingCollective> post_allreduce(void* buf, int64_t count, const Group& group, bool round) override {
    if (stage_) {
      allreduce(buf, count, group, round);
      return std::make_unique<Done>();
    }
    world().create_group(group);  // created in program order, on this thread (communicator.h)
    float* p = static_cast<float*>(buf);
    Communicator* comm = comm_;
    auto ticket = workers_.post(group, [p, count, group, round, comm] {
      if (round) round_bf16(p, static_cast<size_t>(count));
      comm->allreduce(p, static_cast<size_t>(count), group);
    });
    return std::make_unique<Posted>(std::move(ticket));
  }
  std::unique_ptr<PendingCollective> post_send(const void* buf, int64_t count, int peer, uint32_t tag) override {
    auto t = std::make_unique<HostTransfer>();
    t->host = std::make_unique<HostSide>(be_, *this, stage_, buf, count, true);
    t->req = world().isend(t->host->p, t->host->n, peer, tag);
    return t;
  }
  std::unique_ptr<PendingCollective> post_recv(void* buf, int64_t count, int peer, uint32_t tag) override {
    auto t = std::make_unique<HostTransfer>();
    t->host = std::make_unique<HostSide>(be_, *this, stage_, buf, count, false);
    t->receive = true;
    t->req = world().irecv(t->host->p, t->host->n, peer, tag);
    return t;
  }
  void allreduce_host(float* values, size_t count, const Group& group) override {
    workers_.drain(group);
    world().allreduce(values, count, group);
  }

 private:
  Communicator& world() {
    if (!comm_) throw RuntimeError("internal: a collective on a run of one rank");
    return *comm_;
  }
  Communicator* comm_;
  Backend& be_;
  bool stage_;
  GroupWorkers workers_;  // last: joined before the rest goes
};

}  // namespace

std::unique_ptr<Collectives> make_host_collectives(Communicator* comm, Backend& be, bool stage) {
  return std::make_unique<HostCollectives>(comm, be, stage);
}

void instr_buffers(const RankProgram& prog, const PInstr& in, std::vector<int>& out, bool& all) {
  out.clear();
  all = false;
  switch (in.kind) {
    case PInstr::LossAllReduce:  // the squared norm reads every gradient
    case PInstr::Clip:           // scales every gradient
      all = true;
      return;
    case PInstr::BucketAllReduce:
      if (in.index >= 0 && static_cast<size_t>(in.index) < prog.buckets.size()) out = prog.buckets[static_cast<size_t>(in.index)];
      return;
    default:
      // The kernel-level instructions (Forward, Backward...) touch only the
      // kernel's local tensors, and the ones read in place were named by
      // their SliceIn; every other instruction names its buffers in a and b.
      if (in.a >= 0) out.push_back(in.a);
      if (in.b >= 0) out.push_back(in.b);
      return;
  }
}

// One backward pass: for each buffer, whether the next instruction
// touching it (after the one at hand) is its Free.
std::vector<char> add_to_sources_freed_next(const RankProgram& prog) {
  std::vector<char> dies(prog.instrs.size(), 0);
  enum : char { kNone, kFree, kOther };
  std::vector<char> next(prog.buffers.size(), kNone);
  std::vector<int> touched;
  for (size_t i = prog.instrs.size(); i-- > 0;) {
    const PInstr& in = prog.instrs[i];
    const bool known = in.a >= 0 && static_cast<size_t>(in.a) < next.size();
    if (in.kind == PInstr::AddTo && known && in.a != in.b) dies[i] = next[static_cast<size_t>(in.a)] == kFree;
    bool all = false;
    instr_buffers(prog, in, touched, all);
    if (all) std::fill(next.begin(), next.end(), kOther);
    for (int b : touched)
      if (b >= 0 && static_cast<size_t>(b) < next.size())
        next[static_cast<size_t>(b)] = in.kind == PInstr::Free ? kFree : kOther;
  }
  return dies;
}

void PendingTable::post(Entry e) {
  const int id = next_++;
  for (int b : e.buffers) by_buffer_.emplace(b, id);
  entries_.emplace(id, std::move(e));
}

void PendingTable::complete_entry(int id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry e = std::move(it->second);
  entries_.erase(it);
  for (int b : e.buffers)
    for (auto [lo, hi] = by_buffer_.equal_range(b); lo != hi;) lo = lo->second == id ? by_buffer_.erase(lo) : std::next(lo);
  if (e.op) e.op->wait();
  if (e.done) e.done();
}

int PendingTable::complete(int b) {
  int n = 0;
  // Oldest first: two posts over one buffer complete in the order they were made.
  while (true) {
    auto [lo, hi] = by_buffer_.equal_range(b);
    if (lo == hi) return n;
    int id = lo->second;
    for (auto it = lo; it != hi; ++it) id = std::min(id, it->second);
    complete_entry(id);
    ++n;
  }
}

int PendingTable::settle(const RankProgram& prog, const PInstr& in) {
  if (entries_.empty()) return 0;
  bool all = false;
  instr_buffers(prog, in, scratch_, all);
  if (all) return finish();
  int n = 0;
  for (int b : scratch_) n += complete(b);
  return n;
}

int PendingTable::finish() {
  int n = 0;
  while (!entries_.empty()) {
    complete_entry(entries_.begin()->first);
    ++n;
  }
  return n;
}

std::string transfers_out_of_tag_order(const RankProgram& prog) {
  std::map<std::pair<int, bool>, uint32_t> last;
  for (const PInstr& in : prog.instrs) {
    if (in.kind != PInstr::Send && in.kind != PInstr::Recv) continue;
    const bool send = in.kind == PInstr::Send;
    auto key = std::make_pair(in.peer, send);
    auto it = last.find(key);
    if (it != last.end() && in.tag <= it->second) return std::string(send ? "sends to" : "receives from") + " rank " + std::to_string(in.peer);
    last[key] = in.tag;
  }
  return "";
}

bool choose_collectives(const std::string& requested, const CommFacts& f, std::string& out, std::string& why, std::string& err, bool& usage) {
  usage = false;
  if (requested != "auto" && requested != "gloo" && requested != "nccl") {
    usage = true;
    err = "--comm is auto, gloo or nccl (got '" + requested + "')";
    return false;
  }
  // Why NCCL cannot carry this run; empty when it can.
  std::string no_nccl;
  if (f.device != "cuda")
    no_nccl = f.device == "cuda-emulation" ? "the CUDA emulation's memory is host memory, NCCL needs a GPU (--device cuda)"
                                           : "NCCL needs the CUDA backend (--device cuda); this run is on " + f.device;
  else if (!f.nccl_built)
    no_nccl = "this nns was built without NCCL (nccl.h / libnccl not found at configure time)";
  else if (f.local_ranks > f.visible_gpus)
    no_nccl = std::to_string(f.local_ranks) + " rank(s) on this host share " + std::to_string(f.visible_gpus) +
              " GPU(s); NCCL needs a GPU per rank (it refuses two ranks on one device)";
  else if (f.bf16_reduce)
    no_nccl = "grad_reduce = \"bf16\" rounds the gradients on the host; there is no device path for it yet";
  if (requested == "nccl") {
    if (!no_nccl.empty()) {
      err = "--comm nccl: " + no_nccl;
      return false;
    }
    out = "nccl";
    why = "--comm nccl";
    return true;
  }
  if (requested == "gloo") {
    out = "gloo";
    why = "--comm gloo";
    return true;
  }
  if (f.ranks <= 1) {
    out = "gloo";
    why = "one rank: no collectives";
    return true;
  }
  out = no_nccl.empty() ? "nccl" : "gloo";
  why = no_nccl.empty() ? "a GPU per rank" : no_nccl;
  return true;
}

}  // namespace nns::backend
