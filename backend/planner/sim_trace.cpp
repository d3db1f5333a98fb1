#include "backend/planner/sim_trace.h"

#include <cstdio>

namespace nns::planner {

namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else o += c;
  }
  return o;
}

const char* track_name(int t) { return t == 1 ? "compute" : t == 2 ? "comm" : "local"; }

std::string label(const backend::RankProgram& prog, const sema::Graph* g, const backend::PInstr& in) {
  std::string name = backend::instr_name(in.kind);
  if (in.kernel >= 0 && static_cast<size_t>(in.kernel) < prog.kernels.size()) {
    int node = prog.kernels[static_cast<size_t>(in.kernel)].node;
    if (g && node >= 0 && static_cast<size_t>(node) < g->nodes().size()) name = g->node(node).name + " " + name;
  }
  if (in.kind == backend::PInstr::Send || in.kind == backend::PInstr::Recv) name += " peer " + std::to_string(in.peer);
  if (in.mb >= 0) name += " mb" + std::to_string(in.mb);
  return name;
}

}  // namespace

bool write_sim_trace(const std::string& path, const backend::LoweredPlan& lp, const sema::Graph* g, const SimResult& r,
                     std::string& err, const NodeTimes& node_times) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) { err = "--trace: cannot write " + path; return false; }
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"nns simulate --trace\",\"ranks\":%zu},\n\"traceEvents\":[\n",
               lp.programs.size());
  bool first = true;
  auto sep = [&] {
    std::fputs(first ? "" : ",\n", f);
    first = false;
  };
  for (const backend::RankProgram& p : lp.programs) {
    sep();
    std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d (device %d)\"}}", p.rank, p.rank, p.device);
    sep();
    std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}", p.rank, p.rank);
    for (int t = 1; t <= 3; ++t) {
      sep();
      std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}", p.rank, t, track_name(t));
    }
  }
  for (const SimEvent& e : r.events) {
    const backend::RankProgram& p = lp.programs[static_cast<size_t>(e.rank)];
    const backend::PInstr& in = p.instrs[static_cast<size_t>(e.instr)];
    sep();
    std::fprintf(f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":\"%s\",\"cat\":\"%s\",\"args\":{\"instr\":%d}}", p.rank,
                 static_cast<int>(e.track), e.begin * 1e6, (e.end - e.begin) * 1e6, escape(label(p, g, in)).c_str(), track_name(e.track),
                 e.instr);
    if (!node_times || e.track != 1) continue;
    const char* phase = in.kind == backend::PInstr::Forward ? "F" : in.kind == backend::PInstr::Backward ? "B" : "W";
    double t = e.begin;
    for (const auto& [node, secs] : node_times(p, in)) {
      const sema::OpNode& n = p.local.node(node);
      sep();
      std::fprintf(f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,\"name\":\"%s %s\",\"cat\":\"compute\",\"args\":{\"op\":\"%s\"}}",
                   p.rank, t * 1e6, secs * 1e6, escape(n.name).c_str(), phase, escape(n.kind).c_str());
      t += secs;
    }
  }
  std::fputs("\n]}\n", f);
  bool ok = std::ferror(f) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) { err = "--trace: cannot write " + path; return false; }
  return true;
}

}  // namespace nns::planner
