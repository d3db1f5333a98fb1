// The one printer of lowered programs (--emit=program): the one-device
// Program of the single-device trainer and the per-rank programs of a plan,
// in one style — a header line with the counts, then one instruction per
// line, deterministic (stable ids, no addresses), golden-tested.
#include "backend/lowering/program.h"
#include "backend/lowering/rank_program.h"

#include <sstream>

namespace nns::backend {

const char* role_name(BufferDecl::Role r) {
  switch (r) {
    case BufferDecl::Param: return "param";
    case BufferDecl::Accum: return "accum";
    case BufferDecl::Input: return "input";
    case BufferDecl::Value: return "value";
    case BufferDecl::Grad: return "grad";
    case BufferDecl::Contrib: return "contrib";
    case BufferDecl::Transit: return "transit";
    case BufferDecl::Bucket: return "bucket";
    case BufferDecl::Shard: return "shard";
  }
  return "?";
}

const char* instr_name(PInstr::Kind k) {
  switch (k) {
    case PInstr::Alloc: return "alloc";
    case PInstr::Free: return "free";
    case PInstr::LoadInput: return "load-input";
    case PInstr::Extract: return "extract";
    case PInstr::AddTo: return "add-to";
    case PInstr::Insert: return "insert";
    case PInstr::SliceIn: return "slice-in";
    case PInstr::Forward: return "forward";
    case PInstr::CollectOut: return "collect-out";
    case PInstr::DropForward: return "drop-forward";
    case PInstr::SeedGrad: return "seed-grad";
    case PInstr::SliceGrad: return "slice-grad";
    case PInstr::Backward: return "backward";
    case PInstr::BackwardW: return "backward-w";
    case PInstr::CollectGrad: return "collect-grad";
    case PInstr::FreeKernel: return "free-kernel";
    case PInstr::AllReduce: return "allreduce";
    case PInstr::AllGather: return "allgather";
    case PInstr::ReduceScatter: return "reduce-scatter";
    case PInstr::AllToAll: return "all-to-all";
    case PInstr::Send: return "send";
    case PInstr::Recv: return "recv";
    case PInstr::Wait: return "wait";
    case PInstr::BucketAllReduce: return "bucket-allreduce";
    case PInstr::ReplicaAverage: return "replica-average";
    case PInstr::LossShare: return "loss-share";
    case PInstr::LossAllReduce: return "loss-allreduce";
    case PInstr::Clip: return "clip";
    case PInstr::Update: return "update";
  }
  return "?";
}

bool PInstr::is_collective() const {
  switch (kind) {
    case AllReduce:
    case AllGather:
    case ReduceScatter:
    case AllToAll:
    case Send:
    case Recv:
    case BucketAllReduce:
    case ReplicaAverage:
    case LossAllReduce:
      return true;
    default:
      return false;
  }
}

namespace {

std::string piece_text(const Piece& p) {
  std::string s = region_text(p.start, p.length);
  if (p.value_parts > 1) s += " v" + std::to_string(p.value_index) + "/" + std::to_string(p.value_parts);
  if (p.replicas > 1) s += " r" + std::to_string(p.replica_index) + "/" + std::to_string(p.replicas);
  return s;
}

std::string tensor_text(const sema::Graph& g, int t) {
  const sema::TensorInfo& info = g.tensor(t);
  return info.kind == sema::TensorKind::Activation ? "%" + std::to_string(t) : info.name;
}

std::string scale_text(float s) {
  if (s == 1.f) return "";
  std::ostringstream o;
  o << " x" << s;
  return o.str();
}

}  // namespace

// Elements a collective moves per call, as the Communicator is called with
// them (allgather / reduce-scatter / all-to-all: the per-member chunk).
static int64_t collective_count(const RankProgram& p, const PInstr& in) {
  auto numel = [&](int b) { return p.buffers[static_cast<size_t>(b)].piece.numel(); };
  switch (in.kind) {
    case PInstr::AllReduce:
    case PInstr::Send:
    case PInstr::ReplicaAverage:
      return numel(in.a);
    case PInstr::Recv:
    case PInstr::ReduceScatter:
      return numel(in.b);
    case PInstr::AllGather:
      return numel(in.a);
    case PInstr::AllToAll:
      return in.count;
    case PInstr::BucketAllReduce: {
      int64_t n = 0;
      for (int b : p.buckets[static_cast<size_t>(in.index)]) n += numel(b);
      return n;
    }
    case PInstr::LossAllReduce:
      return 2;
    default:
      return 0;
  }
}

std::vector<std::string> LoweredPlan::collective_trace(const RankProgram& p) const {
  std::vector<std::string> out;
  for (const PInstr& in : p.instrs) {
    if (!in.is_collective()) continue;
    std::string count = std::to_string(collective_count(p, in));
    if (in.kind == PInstr::Send) out.push_back("send " + count + " to " + std::to_string(in.peer));
    else if (in.kind == PInstr::Recv) out.push_back("recv " + count + " from " + std::to_string(in.peer));
    else if (groups[static_cast<size_t>(in.group)].size() > 1) {
      const char* prim = in.kind == PInstr::AllGather       ? "allgather"
                         : in.kind == PInstr::ReduceScatter ? "reduce-scatter"
                         : in.kind == PInstr::AllToAll      ? "all-to-all"
                                                            : "allreduce";
      out.push_back(std::string(prim) + " " + count + " " + group_text(groups[static_cast<size_t>(in.group)]));
    }
  }
  return out;
}

std::string LoweredPlan::instr_text(const sema::Graph& g, const RankProgram& p, const PInstr& in) const {
  std::ostringstream o;
  auto buf = [](int b) { return b < 0 ? std::string("zeros") : "b" + std::to_string(b); };
  auto edge_note = [&]() {
    if (in.edge < 0)
      return in.kind == PInstr::ReduceScatter || in.kind == PInstr::AllGather
                 ? "  (zero1: " +
                       std::string(in.kind == PInstr::ReduceScatter ? "gradient of " : "updated shards of ") +
                       tensor_text(g, p.buffers[static_cast<size_t>(in.a)].tensor) + ")"
                 : std::string();
    const CommEdge& e = comm->edges[static_cast<size_t>(in.edge)];
    std::string from = e.producer >= 0 ? g.node(e.producer).name : "storage";
    std::string to = e.consumer >= 0 ? g.node(e.consumer).name : "update";
    return "  (" + std::string(e.backward ? "gradient of " : "") + tensor_text(g, e.tensor) + " " + from + " -> " + to +
           ", step " + std::to_string(in.step + 1) + ")";
  };
  auto over = [&]() {
    return " count " + std::to_string(collective_count(p, in)) + " over ranks " +
           group_text(groups[static_cast<size_t>(in.group)]);
  };
  o << (in.mb >= 0 ? "mb" + std::to_string(in.mb) : std::string("step")) << " " << instr_name(in.kind);
  std::string k = "k" + std::to_string(in.kernel);
  switch (in.kind) {
    case PInstr::Alloc:
    case PInstr::SeedGrad: o << " " << buf(in.b); break;
    case PInstr::Free: o << " " << buf(in.a); break;
    case PInstr::LoadInput:
      o << " " << buf(in.b) << " = " << tensor_text(g, p.buffers[static_cast<size_t>(in.b)].tensor);
      break;
    case PInstr::Extract: o << " " << buf(in.b) << " <- " << buf(in.a) << scale_text(in.scale); break;
    case PInstr::AddTo: o << " " << buf(in.b) << " += " << buf(in.a) << scale_text(in.scale); break;
    case PInstr::Insert: o << " " << buf(in.b) << " <+ " << buf(in.a); break;
    case PInstr::SliceIn: o << " " << k << ".in" << in.index << " <- " << buf(in.a) << scale_text(in.scale); break;
    case PInstr::Forward:
    case PInstr::DropForward:
    case PInstr::Backward:
    case PInstr::BackwardW:
    case PInstr::FreeKernel: o << " " << k; break;
    case PInstr::Wait: o << " " << buf(in.a); break;
    case PInstr::CollectOut: o << " " << buf(in.b) << " += " << k << ".out" << in.index << scale_text(in.scale); break;
    case PInstr::SliceGrad: o << " " << k << ".dy" << in.index << " <- " << buf(in.a) << scale_text(in.scale); break;
    case PInstr::CollectGrad: o << " " << buf(in.b) << " += " << k << ".din" << in.index; break;
    case PInstr::AllReduce: o << " " << buf(in.a) << over() << edge_note(); break;
    case PInstr::AllGather:
    case PInstr::ReduceScatter:
    case PInstr::AllToAll: o << " " << buf(in.a) << " -> " << buf(in.b) << over() << edge_note(); break;
    case PInstr::Send:
      o << " " << buf(in.a) << " count " << collective_count(p, in) << " to rank " << in.peer << " tag " << in.tag;
      if (in.index >= 0) o << " released at tag " << in.index;
      o << edge_note();
      break;
    case PInstr::Recv:
      o << " " << buf(in.b) << " count " << collective_count(p, in) << " from rank " << in.peer << " tag " << in.tag
        << edge_note();
      break;
    case PInstr::BucketAllReduce: {
      o << " bucket " << in.index << " [";
      const auto& bs = p.buckets[static_cast<size_t>(in.index)];
      for (size_t i = 0; i < bs.size(); ++i) o << (i ? " " : "") << buf(bs[i]);
      o << "]" << over();
      break;
    }
    case PInstr::ReplicaAverage:
      o << " " << buf(in.a) << over() << scale_text(in.scale);
      if (in.count > 1) o << " reduce-scattered into " << in.count << " shards";
      break;
    case PInstr::LossShare: o << " " << buf(in.a) << scale_text(in.scale); break;
    case PInstr::LossAllReduce: o << over(); break;
    case PInstr::Clip: break;
    case PInstr::Update:
      o << " " << buf(in.a) << " (" << tensor_text(g, p.buffers[static_cast<size_t>(in.a)].tensor) << ") with "
        << buf(in.b);
      break;
  }

  return o.str();
}

std::string LoweredPlan::dump_rank(const sema::Graph& g, const RankProgram& p) const {
  std::ostringstream o;
  o << "program rank " << p.rank << " (device " << p.device << " of plan " << plan << ", replica " << p.replica << " of " << replicas
    << "): " << p.kernels.size() << " kernel(s), " << p.buffers.size() << " buffer(s), " << p.instrs.size() << " instruction(s), "
    << micro_batches << " micro-batch(es) {\n";
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const SubOpKernel& kn = p.kernels[k];
    o << "  kernel k" << k << " = " << g.node(kn.node).name << " sub-op #" << kn.subop << " in";
    for (const Piece& s : kn.in_slices) o << " " << piece_text(s);
    o << " out";
    for (const Piece& s : kn.out_slices) o << " " << piece_text(s);
    if (kn.scale != 1.f) o << " loss-share" << scale_text(kn.scale);
    if (kn.recompute) o << " recompute";
    for (size_t i = 0; i < kn.regather_inputs.size(); ++i)
      if (kn.regather_inputs[i]) o << " regather-in" << i;
    if (kn.elaborated) {
      o << ":";
      for (int ln : kn.inst.nodes) o << " " << p.local.node(ln).kind;
      if (!kn.bwd.nodes.empty()) o << " | backward " << kn.bwd.nodes.size() << " op(s)";
      if (!kn.wgrad_nodes.empty()) o << " | weight-gradient " << kn.wgrad_nodes.size() << " op(s)";
    }
    o << "\n";
  }
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const BufferDecl& d = p.buffers[b];
    o << "  buffer b" << b << " " << role_name(d.role) << " " << tensor_text(g, d.tensor);
    if (d.mb >= 0) o << " mb" << d.mb;
    o << " " << piece_text(d.piece) << "\n";
  }
  for (const PInstr& in : p.instrs) o << "  " << instr_text(g, p, in) << "\n";
  o << "}\n";
  return o.str();
}

std::string Program::dump(const sema::Graph& g) const {
  std::ostringstream out;
  out << "program (one device): " << instrs.size() << " instruction(s), " << persistent.size() << " persistent tensor(s) {\n";
  for (const Instr& in : instrs) {
    if (in.kind == Instr::Free) {
      out << "  free %" << in.tensor << "\n";
      continue;
    }
    const sema::OpNode& n = g.node(in.node);
    out << "  " << (in.kind == Instr::Update ? "update " : "run ") << n.kind << " " << n.name << " (";
    for (size_t i = 0; i < n.inputs.size(); ++i) out << (i ? ", " : "") << "%" << n.inputs[i];
    out << ") -> (";
    for (size_t i = 0; i < n.outputs.size(); ++i) out << (i ? ", " : "") << "%" << n.outputs[i];
    out << ")\n";
  }
  out << "}\n";
  return out.str();
}

std::string LoweredPlan::dump(const sema::Graph& g) const {
  std::string s;
  for (const RankProgram& p : programs) s += dump_rank(g, p);
  return s;
}

}  // namespace nns::backend
