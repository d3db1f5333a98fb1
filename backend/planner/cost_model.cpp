#include "backend/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "backend/planner/json.h"
#include "frontend/regular_file.h"

namespace nns::planner {

namespace {

bool number(const Json& root, const char* key, double& out, std::string& err, bool required = true) {
  const Json* v = field(root, key);
  if (!v) {
    if (required) err = std::string("missing field \"") + key + "\"";
    return !required;
  }
  if (!v->is_number() || !(v->get<double>() >= 0) || !std::isfinite(v->get<double>())) {
    err = std::string("field \"") + key + "\" must be a non-negative number";
    return false;
  }
  out = v->get<double>();
  return true;
}

// A count field (devices per node, threads, ranks) as an int: whole and in
// [lo, hi], checked before the conversion (1e300 or 1.5 used to be cast).
bool count(double v, const char* key, int lo, int hi, int& out, std::string& err) {
  if (!(v >= lo && v <= hi) || v != std::floor(v)) {
    err = std::string("field \"") + key + "\" must be a whole number from " + std::to_string(lo) + " to " +
          std::to_string(hi) + ", got " + Json(v).dump();
    return false;
  }
  out = static_cast<int>(v);
  return true;
}

// The most an efficiency may be: 1, plus the noise of a measured profile
// whose peak is itself one measurement (stdlib/profiles/cpu.json has matmul
// at 1.00031 of its linear peak).
constexpr double kMaxEfficiency = 1.01;

// Checks a parsed profile makes sense as a whole: an fp32 peak (the default
// every other dtype falls back to), finite peaks, efficiencies in (0, 1] (up to noise),
// a name without control characters. (In-situ extras may be negative: they
// correct the model's estimate both ways, as the measured cpu.json does.)
bool profile_sane(const DeviceProfile& p, std::string& err) {
  if (!p.peak_flops.count("fp32")) {
    err = "field \"peak_flops\" must give \"fp32\" (the peak other dtypes fall back to)";
    return false;
  }
  for (const auto& [dtype, v] : p.peak_flops)
    if (!std::isfinite(v)) {
      err = "peak_flops." + dtype + " must be finite";
      return false;
    }
  for (const auto& [op, curve] : p.efficiency)
    for (const auto& [flops, e] : curve)
      if (!std::isfinite(flops) || !(e <= kMaxEfficiency)) {
        err = "efficiency." + op + ": an efficiency is a fraction of the peak, at most 1 (got " + Json(e).dump() +
              " at " + Json(flops).dump() + "; measured curves may pass 1 by noise, up to " +
              Json(kMaxEfficiency).dump() + ")";
        return false;
      }
  for (char c : p.name)
    if (static_cast<unsigned char>(c) < 0x20) {
      err = "field \"name\" must not contain control characters";
      return false;
    }
  return true;
}

// Measured [bytes, seconds] points, at least two, sorted by bytes.
bool points(const Json& pts, const std::string& what, std::vector<std::pair<double, double>>& out, std::string& err) {
  bool ok = pts.is_array() && pts.size() >= 2;
  for (const Json& pt : pts) {
    ok = ok && pt.is_array() && pt.size() == 2 && pt[0].is_number() && pt[1].is_number() &&
         pt[0].get<double>() >= 0 && pt[1].get<double>() > 0;
    if (!ok) break;
    out.emplace_back(pt[0].get<double>(), pt[1].get<double>());
  }
  if (!ok) {
    err = what + ".points must be a list of at least two [bytes, seconds] pairs";
    return false;
  }
  std::sort(out.begin(), out.end());
  return true;
}

// An optional {"overhead": s, "bandwidth": B/s} object.
bool line(const Json& root, const char* key, LineCost& out, std::string& err) {
  const Json* v = field(root, key);
  if (!v) return true;
  const Json* o = field(*v, "overhead");
  const Json* b = field(*v, "bandwidth");
  if (!o || !b || !o->is_number() || !b->is_number() || !(o->get<double>() >= 0) || !(b->get<double>() > 0) ||
      !std::isfinite(o->get<double>()) || !std::isfinite(b->get<double>())) {
    err = std::string("field \"") + key + "\" must be {\"overhead\": seconds >= 0, \"bandwidth\": bytes/s > 0}";
    return false;
  }
  out.overhead = o->get<double>();
  out.bandwidth = b->get<double>();
  if (const Json* pts = field(*v, "points")) return points(*pts, key, out.points, err);
  return true;
}

}  // namespace

bool parse_profile(const std::string& json_text, DeviceProfile& out, std::string& err) {
  Json root;
  if (json_text.find('\0') != std::string::npos) {
    err = "offset " + std::to_string(json_text.find('\0')) + ": a NUL byte (a profile is JSON text)";
    return false;
  }
  if (!parse_json(json_text, root, err)) return false;
  if (!root.is_object()) { err = "a profile is a JSON object"; return false; }
  out = DeviceProfile{};
  if (const Json* n = field(root, "name"); n && n->is_string()) out.name = n->get<std::string>();
  const Json* peaks = field(root, "peak_flops");
  if (!peaks || !peaks->is_object() || peaks->empty()) {
    err = "field \"peak_flops\" must be an object of dtype: FLOP/s";
    return false;
  }
  for (const auto& [dtype, v] : peaks->items()) {
    if (!v.is_number() || !(v.get<double>() > 0)) {
      err = "peak_flops." + dtype + " must be a positive number";
      return false;
    }
    out.peak_flops[dtype] = v.get<double>();
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
  if (!count(dpn, "devices_per_node", 1, 65536, out.devices_per_node, err)) return false;
  if (out.memory_bandwidth <= 0 || out.intra.bandwidth <= 0 || out.inter.bandwidth <= 0) {
    err = "bandwidths must be positive";
    return false;
  }
  if (const Json* eff = field(root, "efficiency")) {
    if (!eff->is_object()) { err = "field \"efficiency\" must be an object"; return false; }
    for (const auto& [op, pts] : eff->items()) {
      auto& curve = out.efficiency[op];
      bool ok = pts.is_array();
      for (const Json& pt : pts) {
        ok = ok && pt.is_array() && pt.size() == 2 && pt[0].is_number() &&
             pt[1].is_number() && pt[0].get<double>() > 0 && pt[1].get<double>() > 0;
        if (!ok) break;
        curve.emplace_back(pt[0].get<double>(), pt[1].get<double>());
      }
      if (!ok) {
        err = "efficiency." + op + " must be a list of [flops, efficiency] pairs, both positive";
        return false;
      }
      std::sort(curve.begin(), curve.end());
    }
  }
  double threads = 0;
  if (!number(root, "threads", threads, err, false) || !number(root, "kernel_overhead", out.kernel_overhead, err, false) ||
      !number(root, "instr_overhead", out.instr_overhead, err, false) ||
      !line(root, "copy", out.copy, err) || !line(root, "accumulate", out.accumulate, err) || !line(root, "update", out.update, err) ||
      !line(root, "copy_cold", out.copy_cold, err) || !line(root, "accumulate_cold", out.accumulate_cold, err) ||
      !number(root, "memory_bandwidth_cold", out.memory_bandwidth_cold, err, false) ||
      !number(root, "cache_bytes", out.cache_bytes, err, false))
    return false;
  if (!count(threads, "threads", 0, 4096, out.threads, err)) return false;
  if (const Json* gb = field(root, "gradient_buckets")) {
    const Json* e = gb->is_object() ? field(*gb, "elements") : nullptr;
    const Json* r = gb->is_object() ? field(*gb, "per_replica") : nullptr;
    if (!e || !e->is_number() || !(e->get<double>() > 0) || (r && (!r->is_number() || r->get<double>() < 0))) {
      err = "field \"gradient_buckets\" must be {\"elements\": E > 0, \"per_replica\": R >= 0}";
      return false;
    }
    out.bucket_elements = e->get<double>();
    out.bucket_elements_per_replica = r ? r->get<double>() : 0;
  }
  if (const Json* ko = field(root, "kernel_overheads")) {
    if (!ko->is_object()) { err = "field \"kernel_overheads\" must be an object of curve: seconds"; return false; }
    for (const auto& [name, v] : ko->items()) {
      if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
        err = "kernel_overheads." + name + " must be a non-negative number of seconds";
        return false;
      }
      out.kernel_overheads[name] = v.get<double>();
    }
  }
  if (const Json* situ = field(root, "in_situ")) {
    const Json* lengths = field(*situ, "instructions");
    const Json* extra = field(*situ, "extra");
    bool ok = lengths && extra && lengths->is_array() && !lengths->empty() && extra->is_object();
    for (size_t i = 0; ok && i < lengths->size(); ++i) {
      ok = lengths->at(i).is_number() && lengths->at(i).get<double>() > 0 && (i == 0 || lengths->at(i).get<double>() > lengths->at(i - 1).get<double>());
      if (ok) out.in_situ_instructions.push_back(lengths->at(i).get<double>());
    }
    static const Json kNoExtra = Json::object();
    for (const auto& [kind, v] : ok ? extra->items() : kNoExtra.items()) {
      ok = v.is_array() && v.size() == lengths->size();
      if (!ok) break;
      for (const Json& x : v) {
        ok = ok && x.is_number() && std::isfinite(x.get<double>());
        if (ok) out.in_situ_extra[kind].push_back(x.get<double>());
      }
      if (!ok) break;
    }
    if (!ok) {
      err = "field \"in_situ\" must be {\"instructions\": [ascending positive lengths], \"extra\": {kind: [seconds per length]}}";
      return false;
    }
  }
  if (const Json* links = field(root, "collectives")) {
    if (!links->is_object()) { err = "field \"collectives\" must be an object"; return false; }
    for (const auto& [name, v] : links->items()) {
      if (name == "ranks") continue;  // the group size the points were measured on
      bool known = false;
      for (Collective k : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll,
                           Collective::SendRecv})
        known = known || name == collective_name(k);
      const Json* lat = field(v, "latency");
      const Json* bw = field(v, "bandwidth");
      if (!known || !lat || !bw || !lat->is_number() || !bw->is_number() || !(lat->get<double>() >= 0) || !(bw->get<double>() > 0)) {
        err = "collectives." + name + " must be {\"latency\": s, \"bandwidth\": B/s} of allreduce, allgather, reduce_scatter, all_to_all or sendrecv";
        return false;
      }
      out.collective_links[name] = LinkCost{bw->get<double>(), lat->get<double>()};
      if (const Json* pts = field(v, "points")) {
        LineCost curve;
        curve.bandwidth = bw->get<double>();
        if (!points(*pts, "collectives." + name, curve.points, err)) return false;
        out.collective_curves[name] = curve;
      }
    }
    double ranks = 0;
    if (!number(*links, "ranks", ranks, err, false)) return false;
    if (!count(ranks, "collectives.ranks", 0, 65536, out.collective_ranks, err)) return false;
    out.collective_links.erase("ranks");
  }
  return profile_sane(out, err);
}

bool load_profile(const std::string& spec, const std::string& profiles_dir, DeviceProfile& out,
                  std::string& err) {
  std::string path = spec;
  if (spec.find('/') == std::string::npos && spec.find(".json") == std::string::npos)
    path = profiles_dir + "/" + spec + ".json";
  // A regular file of at most 16 MiB: a FIFO path or /dev/zero is refused,
  // not waited on.
  std::string text, why;
  if (!front::read_regular_file(path, text, why, int64_t{16} << 20)) {
    err = "cannot read device profile '" + path + "': " + why;
    return false;
  }
  if (!parse_profile(text, out, err)) {
    err = path + ": " + err;
    return false;
  }
  if (out.name.empty()) out.name = spec;
  return true;
}

namespace {

// The efficiency curve op is costed with: its own, else (when the profile
// has none) "X_backward"'s "X", "attention"'s "matmul"; "" when none of
// them has a curve.
std::string curve_of(const DeviceProfile& p, const std::string& op) {
  if (auto it = p.efficiency.find(op); it != p.efficiency.end() && !it->second.empty()) return op;
  const std::string suffix = "_backward";
  if (op.size() > suffix.size() && op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0)
    return curve_of(p, op.substr(0, op.size() - suffix.size()));
  if (op == "attention") return curve_of(p, "matmul");
  return "";
}

}  // namespace

size_t profile_bucket_bytes(const DeviceProfile& p, int replicas) {
  if (p.bucket_elements <= 0) return 0;
  const double elements = std::max(p.bucket_elements, p.bucket_elements_per_replica * std::max(replicas, 1));
  return static_cast<size_t>(elements * 4);
}

double efficiency(const DeviceProfile& p, const std::string& op, double flops) {
  const std::string curve = curve_of(p, op);
  if (curve.empty()) return 1.0;
  const auto& c = p.efficiency.at(curve);
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

double kernel_overhead_for(const DeviceProfile& p, const std::string& curve) {
  if (auto it = p.kernel_overheads.find(curve); it != p.kernel_overheads.end()) return it->second;
  const std::string used = curve_of(p, curve);
  if (auto it = p.kernel_overheads.find(used); !used.empty() && used != curve && it != p.kernel_overheads.end()) return it->second;
  return p.kernel_overhead;
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
  const LinkCost* link = &group_link(p, devices);
  if (link == &p.intra && (kind == Collective::SendRecv || static_cast<int>(n) == p.collective_ranks))
    if (auto it = p.collective_curves.find(collective_name(kind)); it != p.collective_curves.end()) return it->second.time(bytes);
  if (link == &p.intra)
    if (auto it = p.collective_links.find(collective_name(kind)); it != p.collective_links.end()) link = &it->second;
  const LinkCost& l = *link;
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

double in_situ_extra(const DeviceProfile& p, const std::string& kind, double instructions) {
  auto it = p.in_situ_extra.find(kind);
  if (it == p.in_situ_extra.end() || it->second.empty() || it->second.size() != p.in_situ_instructions.size()) return 0.0;
  const std::vector<double>& at = p.in_situ_instructions;
  const std::vector<double>& v = it->second;
  if (instructions <= at.front()) return v.front();
  if (instructions >= at.back()) return v.back();
  size_t i = 1;
  while (instructions > at[i]) ++i;
  const double t = (std::log(instructions) - std::log(at[i - 1])) / (std::log(at[i]) - std::log(at[i - 1]));
  return v[i - 1] + t * (v[i] - v[i - 1]);
}

double LineCost::time(double bytes) const {
  if (points.size() < 2) return overhead + bytes / bandwidth;
  if (bytes <= points.front().first) return points.front().second;
  size_t i = 1;
  while (i + 1 < points.size() && bytes > points[i].first) ++i;
  const auto& [x0, t0] = points[i - 1];
  const auto& [x1, t1] = points[i];
  double t = x1 > x0 ? t0 + (bytes - x0) * (t1 - t0) / (x1 - x0) : t1;
  return std::max(t, 0.0);
}

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::AllReduce: return "allreduce";
    case Collective::AllGather: return "allgather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllToAll: return "all_to_all";
    case Collective::SendRecv: return "sendrecv";
  }
  return "?";
}

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

bool fit_line(const std::vector<std::pair<double, double>>& points, LineCost& out) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& pt : points)
    if (pt.first >= 0 && pt.second > 0 && std::isfinite(pt.first) && std::isfinite(pt.second)) pts.push_back(pt);
  // Theil-Sen: the median of the pairwise slopes, then the median
  // intercept. Timings on a shared machine are bimodal (a transfer that
  // finds its peer asleep takes milliseconds more); a least-squares line
  // follows the outliers, the medians do not.
  std::vector<double> slopes;
  for (size_t i = 0; i < pts.size(); ++i)
    for (size_t k = i + 1; k < pts.size(); ++k)
      if (pts[k].first != pts[i].first) slopes.push_back((pts[k].second - pts[i].second) / (pts[k].first - pts[i].first));
  if (slopes.empty()) return false;
  double c = std::max(0.0, median_of(slopes));
  std::vector<double> intercepts;
  for (const auto& [x, t] : pts) intercepts.push_back(t - c * x);
  double a = median_of(intercepts);
  if (a < 0) {  // through the origin: the median of t / x
    std::vector<double> ratios;
    for (const auto& [x, t] : pts)
      if (x > 0) ratios.push_back(t / x);
    a = 0;
    c = ratios.empty() ? c : median_of(ratios);
  }
  out.overhead = a;
  out.bandwidth = c > 0 ? 1.0 / c : 1e30;
  return true;
}

bool fit_collective(Collective kind, int n, const std::vector<std::pair<double, double>>& points, LinkCost& out) {
  LineCost l;
  if (n < 2 || !fit_line(points, l)) return false;
  // collective_time = messages * latency + volume * bytes / bandwidth.
  double messages = 1, volume = 1, dn = n;
  switch (kind) {
    case Collective::AllReduce: messages = 2 * (dn - 1); volume = 2 * (dn - 1) / dn; break;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll: messages = dn - 1; volume = (dn - 1) / dn; break;
    case Collective::SendRecv: break;
  }
  out.latency = l.overhead / messages;
  out.bandwidth = l.bandwidth >= 1e30 ? 1e30 : l.bandwidth * volume;
  return true;
}

std::vector<std::pair<double, double>> lower_envelope(std::vector<std::pair<double, double>> points) {
  std::sort(points.begin(), points.end());
  for (size_t i = points.size(); i-- > 1;) points[i - 1].second = std::min(points[i - 1].second, points[i].second);
  return points;
}

std::vector<std::pair<double, double>> fit_efficiency(const std::vector<std::pair<double, double>>& points, double peak,
                                                      double kernel_overhead) {
  std::map<double, std::pair<double, int>> by_flops;  // flops -> (sum of eff, count)
  for (const auto& [flops, t] : points) {
    if (!(flops > 0) || !(t > 0) || !(peak > 0)) continue;
    double work = std::max(t - kernel_overhead, 0.1 * t);
    auto& e = by_flops[flops];
    e.first += flops / (peak * work);
    e.second += 1;
  }
  std::vector<std::pair<double, double>> curve;
  for (const auto& [flops, e] : by_flops) curve.emplace_back(flops, e.first / e.second);
  return curve;
}

}  // namespace nns::planner
