#include "backend/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "backend/planner/json.h"

namespace nns::planner {

namespace {

bool number(const Json& root, const char* key, double& out, std::string& err, bool required = true) {
  const Json* v = root.find(key);
  if (!v) {
    if (required) err = std::string("missing field \"") + key + "\"";
    return !required;
  }
  if (v->kind != Json::Number || !(v->num >= 0) || !std::isfinite(v->num)) {
    err = std::string("field \"") + key + "\" must be a non-negative number";
    return false;
  }
  out = v->num;
  return true;
}

}  // namespace

bool parse_profile(const std::string& json_text, DeviceProfile& out, std::string& err) {
  Json root;
  if (!parse_json(json_text, root, err)) return false;
  if (root.kind != Json::Object) { err = "a profile is a JSON object"; return false; }
  out = DeviceProfile{};
  if (const Json* n = root.find("name"); n && n->kind == Json::String) out.name = n->str;
  const Json* peaks = root.find("peak_flops");
  if (!peaks || peaks->kind != Json::Object || peaks->obj.empty()) {
    err = "field \"peak_flops\" must be an object of dtype: FLOP/s";
    return false;
  }
  for (const auto& [dtype, v] : peaks->obj) {
    if (v.kind != Json::Number || !(v.num > 0)) {
      err = "peak_flops." + dtype + " must be a positive number";
      return false;
    }
    out.peak_flops[dtype] = v.num;
  }
  double dpn = 1;
  if (!number(root, "memory_bytes", out.memory_bytes, err) ||
      !number(root, "memory_bandwidth", out.memory_bandwidth, err) ||
      !number(root, "devices_per_node", dpn, err) ||
      !number(root, "intra_bandwidth", out.intra.bandwidth, err) ||
      !number(root, "intra_latency", out.intra.latency, err))
    return false;
  // A single-node profile (the CPU one) may leave inter-node links out.
  out.inter = out.intra;
  if (!number(root, "inter_bandwidth", out.inter.bandwidth, err, false) ||
      !number(root, "inter_latency", out.inter.latency, err, false))
    return false;
  if (dpn < 1) { err = "devices_per_node must be at least 1"; return false; }
  out.devices_per_node = static_cast<int>(dpn);
  if (out.memory_bandwidth <= 0 || out.intra.bandwidth <= 0 || out.inter.bandwidth <= 0) {
    err = "bandwidths must be positive";
    return false;
  }
  if (const Json* eff = root.find("efficiency")) {
    if (eff->kind != Json::Object) { err = "field \"efficiency\" must be an object"; return false; }
    for (const auto& [op, pts] : eff->obj) {
      auto& curve = out.efficiency[op];
      bool ok = pts.kind == Json::Array;
      for (const Json& pt : pts.arr) {
        ok = ok && pt.kind == Json::Array && pt.arr.size() == 2 && pt.arr[0].kind == Json::Number &&
             pt.arr[1].kind == Json::Number && pt.arr[0].num > 0 && pt.arr[1].num > 0;
        if (!ok) break;
        curve.emplace_back(pt.arr[0].num, pt.arr[1].num);
      }
      if (!ok) {
        err = "efficiency." + op + " must be a list of [flops, efficiency] pairs, both positive";
        return false;
      }
      std::sort(curve.begin(), curve.end());
    }
  }
  return true;
}

bool load_profile(const std::string& spec, const std::string& profiles_dir, DeviceProfile& out,
                  std::string& err) {
  std::string path = spec;
  if (spec.find('/') == std::string::npos && spec.find(".json") == std::string::npos)
    path = profiles_dir + "/" + spec + ".json";
  std::ifstream in(path);
  if (!in) {
    err = "cannot read device profile '" + path + "'";
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (!parse_profile(ss.str(), out, err)) {
    err = path + ": " + err;
    return false;
  }
  if (out.name.empty()) out.name = spec;
  return true;
}

double efficiency(const DeviceProfile& p, const std::string& op, double flops) {
  auto it = p.efficiency.find(op);
  if (it == p.efficiency.end() || it->second.empty()) return 1.0;
  const auto& c = it->second;
  if (flops <= c.front().first) return c.front().second;
  if (flops >= c.back().first) return c.back().second;
  for (size_t i = 1; i < c.size(); ++i) {
    if (flops > c[i].first) continue;
    // Kernel efficiency grows roughly with the log of the problem size.
    double x0 = std::log(c[i - 1].first), x1 = std::log(c[i].first);
    double t = x1 > x0 ? (std::log(flops) - x0) / (x1 - x0) : 1.0;
    return c[i - 1].second + t * (c[i].second - c[i - 1].second);
  }
  return c.back().second;
}

double compute_time(const DeviceProfile& p, const std::string& op, const std::string& dtype,
                    double flops, double bytes) {
  auto it = p.peak_flops.find(dtype);
  if (it == p.peak_flops.end()) it = p.peak_flops.find("fp32");
  if (it == p.peak_flops.end()) it = p.peak_flops.begin();
  double t_compute = flops > 0 ? flops / (it->second * efficiency(p, op, flops)) : 0.0;
  double t_memory = bytes > 0 ? bytes / p.memory_bandwidth : 0.0;
  return std::max(t_compute, t_memory);
}

const LinkCost& group_link(const DeviceProfile& p, const std::vector<int>& devices) {
  if (devices.empty()) return p.intra;
  int node = devices.front() / p.devices_per_node;
  for (int d : devices)
    if (d / p.devices_per_node != node) return p.inter;
  return p.intra;
}

double collective_time(const DeviceProfile& p, Collective kind, double bytes,
                       const std::vector<int>& devices) {
  const double n = static_cast<double>(devices.size());
  if (kind != Collective::SendRecv && n <= 1) return 0.0;
  const LinkCost& l = group_link(p, devices);
  switch (kind) {
    case Collective::AllReduce:
      return 2 * (n - 1) * l.latency + 2 * (n - 1) / n * bytes / l.bandwidth;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
      return (n - 1) * l.latency + (n - 1) / n * bytes / l.bandwidth;
    case Collective::SendRecv:
      return l.latency + bytes / l.bandwidth;
  }
  return 0.0;
}

}  // namespace nns::planner
