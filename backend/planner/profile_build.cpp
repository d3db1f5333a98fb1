// The writing half of nns profile (profile_build.h): measurements to the
// profile's JSON, every figure with a "<field>_source" saying how, when,
// with how many ranks and threads, and at what load it was measured. Rank 0
// fits the cost model's parameters: per collective the measured points
// (used for groups of R) and an alpha-beta link (fit_collective, other
// sizes); per copy kind the points and a Theil-Sen line (fit_line);
// kernel_overhead from the chain; an efficiency curve per class against the
// fp32 peak (the fastest linear measured, fit_efficiency).
#include "backend/planner/profile_build.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace nns::planner {

using Points = MeasuredPoints;

std::string profile_number(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// The last-level cache of cpu0 (sysfs), 32 MiB when it cannot be read.
int64_t l3_cache_bytes() {
  int64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string text;
    if (!(f >> text) || text.empty()) continue;
    int64_t v = std::atoll(text.c_str());
    char unit = text.back();
    if (unit == 'K') v <<= 10;
    else if (unit == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best > 0 ? best : int64_t(32) << 20;
}

namespace {

std::string quote(const std::string& s) { return "\"" + s + "\""; }

// The 1-minute load average: a profile measured on a loaded machine says so.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string first;
  in >> first;
  return first.empty() ? "unknown" : first;
}

std::string today() {
  std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return b;
}

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace

std::string build_profile(const ProfileSettings& s, const CommPoints& comm, const std::vector<KernelPoint>& kernels, double chain,
                          const CopyPoints& copies, std::string& err) {
  const std::string who = "measured by nns profile on " + today() + ", " + std::to_string(s.ranks) + " ranks x " +
                          std::to_string(s.threads) + " thread(s), " + std::to_string(std::thread::hardware_concurrency()) +
                          " cores, load " + load_average();
  std::ostringstream j;
  auto field = [&](const std::string& k, const std::string& v, const std::string& source) {
    j << "  " << quote(k) << ": " << v << ",\n";
    if (!source.empty()) j << "  " << quote(k + "_source") << ": " << quote(source) << ",\n";
  };
  // Peak: the fastest linear (forward) measured.
  double peak = 0;
  for (const KernelPoint& k : kernels)
    if (k.work.op == "matmul") peak = std::max(peak, k.work.flops / k.seconds);
  // Per-kernel overhead: a node of the chain of small kernels of many kinds.
  LineCost ew_line;
  ew_line.overhead = chain;
  if (!(peak > 0) || !(chain > 0)) {
    err = "kernel measurements gave no fit";
    return "";
  }
  // Efficiency curves per class, against the peak, above each curve's own
  // fixed cost: its cheapest kernel's time (at most the chain's per-node
  // cost). One fixed cost for every kind put a reshape's at a linear's
  // (oneDNN's primitive lookup), 3-4x its own.
  std::map<std::string, Points> curves;
  for (const KernelPoint& k : kernels) {
    curves[k.work.op].emplace_back(k.work.flops, k.seconds);
    curves["op:" + k.kind].emplace_back(k.work.flops, k.seconds);
  }
  std::map<std::string, double> overheads;
  for (const auto& [name, pts] : curves) {
    double least = chain;
    for (const auto& pt : pts) least = std::min(least, pt.second);
    overheads[name] = least;
  }
  // The peak is the fastest rate any kernel reached above its curve's fixed
  // cost, so every efficiency is at most 1 by construction. The fastest
  // linear alone, timed with its fixed cost, let a curve pass 1 (the linear's
  // own above its fixed cost; on a loaded machine, any kernel timed in a
  // quieter moment): the profile then failed its own schema. Predicted times
  // do not change (peak x efficiency is what they use).
  double highest = 1;
  for (const auto& [name, pts] : curves)
    for (const auto& [flops, eff] : fit_efficiency(pts, peak, overheads[name])) highest = std::max(highest, eff);
  peak *= highest;
  LineCost cp, acc, up, cp_cold, acc_cold;
  if (!fit_line(copies.copy, cp) || !fit_line(copies.accumulate, acc) || !fit_line(copies.update, up) ||
      !fit_line(copies.copy_cold, cp_cold) || !fit_line(copies.accumulate_cold, acc_cold)) {
    err = "copy measurements gave no fit";
    return "";
  }
  std::map<std::string, LinkCost> links;
  for (Collective c : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                                Collective::AllToAll, Collective::SendRecv}) {
    auto it = comm.by_name.find(collective_name(c));
    if (it == comm.by_name.end() || !fit_collective(c, c == Collective::SendRecv ? 2 : s.ranks, it->second,
                                                             links[it->first])) {
      err = std::string("no fit for ") + collective_name(c);
      return "";
    }
  }
  j << "{\n";
  field("name", quote("cpu"), "");
  field("kind", quote("cpu"), "");
  field("device", quote("this host's CPU backend (oneDNN kernels, nns Communicator)"), who);
  field("threads", std::to_string(s.threads), who + ": kernel threads per rank; the efficiency curves and overhead hold for this count");
  field("ranks", std::to_string(s.ranks), who);
  j << "  \"peak_flops\": {\"fp32\": " << profile_number(peak) << "},\n";
  j << "  \"peak_flops_source\": "
    << quote(
           who +
           ": the fastest rate measured above a curve's fixed cost (linear forward x [4d,d] w [d,d], d up to 512, and every efficiency class)")
    << ",\n";
  double mem = mem_total_bytes() / s.ranks;
  field("memory_bytes", profile_number(mem), who + ": /proc/meminfo MemTotal / " + std::to_string(s.ranks) + " ranks");
  // A copy reads and writes its region: the memory stream is twice the copy's rate.
  field("memory_bandwidth", profile_number(2 * cp.bandwidth), who + ": 2 x the region-copy bandwidth (read + write)");
  field("devices_per_node", std::to_string(s.ranks), who + ": all ranks on this host");
  const LinkCost& sr = links["sendrecv"];
  field("intra_bandwidth", profile_number(sr.bandwidth), who + ": send/recv between ranks 0 and 1 (half a ping-pong), alpha-beta fit");
  field("intra_latency", profile_number(sr.latency), who + ": as intra_bandwidth");
  field("instr_overhead", profile_number(copies.instr), who + ": a Free of an empty buffer through the plan executor (dispatch and bookkeeping)");
  field("kernel_overhead", profile_number(ew_line.overhead),
        who + ": a node of a chain of 176 small nodes of 11 kinds and their backwards, run in turn (outputs allocated zeroed as the plan executor does)");
  auto line = [&](const char* key, const LineCost& l, const Points& pts) {
    j << "  " << quote(key) << ": {\"overhead\": " << profile_number(l.overhead) << ", \"bandwidth\": " << profile_number(l.bandwidth) << ", \"points\": [";
    for (size_t i = 0; i < pts.size(); ++i) j << (i ? ", " : "") << "[" << profile_number(pts[i].first) << ", " << profile_number(pts[i].second) << "]";
    j << "]},\n";
  };
  line("copy", cp, copies.copy);
  j << "  \"copy_source\": " << quote(who + ": Extract instructions through the plan executor on distinct buffers (8 MiB in all; a new buffer, a strided region), points (bytes, seconds) and a Theil-Sen line") << ",\n";
  line("accumulate", acc, copies.accumulate);
  j << "  \"accumulate_source\": " << quote(who + ": AddTo instructions through the plan executor, points (bytes, seconds) and a Theil-Sen line") << ",\n";
  line("copy_cold", cp_cold, copies.copy_cold);
  j << "  \"copy_cold_source\": " << quote(who + ": as copy, over buffers 8 x the last-level cache in all (data from memory)") << ",\n";
  line("accumulate_cold", acc_cold, copies.accumulate_cold);
  j << "  \"accumulate_cold_source\": " << quote(who + ": as accumulate, over buffers 8 x the last-level cache in all") << ",\n";
  field("memory_bandwidth_cold", profile_number(2 * cp_cold.bandwidth), who + ": 2 x the cold region-copy bandwidth (read + write)");
  field("cache_bytes", profile_number(static_cast<double>(l3_cache_bytes()) / s.ranks),
        who + ": the last-level cache (sysfs) shared by " + std::to_string(s.ranks) + " ranks; a program whose buffers exceed it is costed with the cold lines");
  line("update", up, copies.update);
  j << "  \"update_source\": " << quote(who + ": Backend::adamw_update, points (bytes, seconds) and a Theil-Sen line") << ",\n";
  j << "  \"collectives\": {\n    \"ranks\": " << s.ranks;
  bool first = true;
  for (const auto& [name, l] : links) {
    j << ",\n    " << quote(name) << ": {\"latency\": " << profile_number(l.latency) << ", \"bandwidth\": " << profile_number(l.bandwidth);
    // The measured points too, for groups of the measured size (send/recv: any pair).
    const Points& pts = comm.by_name.at(name);
    j << ", \"points\": [";
    for (size_t i = 0; i < pts.size(); ++i) j << (i ? ", " : "") << "[" << profile_number(pts[i].first) << ", " << profile_number(pts[i].second) << "]";
    j << "]}";
  }
  j << "\n  },\n";
  j << "  \"collectives_source\": "
    << quote(
           who +
           ": Communicator collectives on all ranks (sendrecv: ranks 0-1), 4 B to 4 MiB per member, the median of repetitions issued back to back per size (points, used for groups of `ranks` devices) and a Theil-Sen alpha-beta fit per algorithm (other group sizes)")
    << ",\n";
  j << "  \"efficiency\": {";
  first = true;
  for (const auto& [name, pts] : curves) {
    j << (first ? "\n" : ",\n") << "    " << quote(name) << ": [";
    bool f2 = true;
    for (const auto& [flops, eff] : fit_efficiency(pts, peak, overheads[name])) {
      j << (f2 ? "" : ", ") << "[" << profile_number(flops) << ", " << profile_number(eff) << "]";
      f2 = false;
    }
    j << "]";
    first = false;
  }
  j << "\n  },\n";
  j << "  \"kernel_overheads\": {";
  first = true;
  for (const auto& [name, o] : overheads) {
    j << (first ? "" : ", ") << quote(name) << ": " << profile_number(o);
    first = false;
  }
  j << "},\n";
  j << "  \"kernel_overheads_source\": " << quote(who + ": per efficiency curve, its cheapest kernel's median time run in turn (at most kernel_overhead)") << ",\n";
  j << "  \"efficiency_source\": "
    << quote(who + ": run_node per class (linear, batched matmul, softmax, layer_norm, add/gelu/mul_scalar/mul/sub/relu/sigmoid; forward and backward) and per measured kind, "
                   "eff = flops / (peak * (t - the curve's kernel_overheads entry))")
    << "\n}\n";
  return j.str();
}

std::string measurement_summary(const CommPoints& comm, const std::vector<KernelPoint>& kernels, const CopyPoints& copies) {
  std::ostringstream o;
  for (const auto& [name, pts] : {std::make_pair("copy", &copies.copy), std::make_pair("accumulate", &copies.accumulate),
                                  std::make_pair("update", &copies.update)}) {
    o << "  " << name << ":";
    for (const auto& [b, t] : *pts) o << " " << profile_number(b) << "B=" << profile_number(t * 1e6) << "us";
    o << "\n";
  }
  o << "  instruction: " << profile_number(copies.instr * 1e6) << "us\n";
  for (const auto& [name, pts] : comm.by_name) {
    o << "  " << name << ":";
    for (const auto& [b, t] : pts) o << " " << profile_number(b) << "B=" << profile_number(t * 1e6) << "us";
    o << "\n";
  }
  std::map<std::string, int> n;
  for (const KernelPoint& k : kernels) ++n[k.work.op];
  o << "  kernels:";
  for (const auto& [cls, c] : n) o << " " << cls << " x" << c;
  o << "\n";
  return o.str();
}

std::string add_in_situ(const std::string& profile_json, const ProfileSettings& s, const InSitu& situ) {
  std::string json = profile_json.substr(0, profile_json.rfind('}'));
  while (!json.empty() && (json.back() == '\n' || json.back() == ' ')) json.pop_back();
  std::ostringstream add;
  auto join = [](const std::vector<std::string>& v) {
    std::string t;
    for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + v[i];
    return t;
  };
  auto list = [&](const std::vector<double>& v) {
    std::string t = "[";
    for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + profile_number(v[i]);
    return t + "]";
  };
  add << ",\n  \"in_situ\": {\"instructions\": " << list(situ.instructions) << ", \"extra\": {";
  bool first = true;
  for (const auto& [kind, v] : situ.extra) {
    add << (first ? "" : ", ") << quote(kind) << ": " << list(v);
    first = false;
  }
  add << "}},\n  \"in_situ_source\": "
      << quote("measured by nns profile on " + today() + ": stdlib/profiles/calibration.nns (plan megatron, configs " + join(situ.configs) + ") run by nns run --gpus " +
               std::to_string(s.ranks) + " --trace with every instruction traced; per instruction kind, the median over rank 0's instructions of "
               "(its mean over steps 5-12 of three runs - this profile's cost without in_situ); interpolated in log(program instructions)")
      << "\n}\n";
  return json + add.str();
}

}  // namespace nns::planner
