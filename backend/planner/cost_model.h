// Device profiles and the cost model (issue 12, parts 1 and 2).
//
// A DeviceProfile is the data of one stdlib/profiles/*.json file: peak dense
// throughput per dtype, memory size and bandwidth, and the interconnect
// (devices per node; intra-node and inter-node bandwidth and latency). The
// cost model turns a sub-op's FLOPs and bytes into time with a roofline whose
// compute side is scaled by an efficiency curve (efficiency vs FLOPs, fitted
// from a measured profile; 1 when the profile has none), and a collective's
// bytes into time with the alpha-beta model of its algorithm over the
// slowest link its group crosses.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nns::planner {

struct LinkCost {
  double bandwidth = 0;  // bytes per second, per direction
  double latency = 0;    // seconds per message
};

struct DeviceProfile {
  std::string name;
  std::map<std::string, double> peak_flops;  // dtype -> FLOP/s (dense)
  double memory_bytes = 0;
  double memory_bandwidth = 0;  // bytes per second
  int devices_per_node = 1;
  LinkCost intra, inter;
  // Per op class ("matmul", "softmax", "layer_norm", "elementwise", ...):
  // (flops, efficiency) points, ascending in flops. Interpolated in log(flops),
  // clamped at both ends. A class without a curve runs at efficiency 1.
  std::map<std::string, std::vector<std::pair<double, double>>> efficiency;
};

// Reads a profile from JSON text; on error returns false with err set
// (what is wrong, with the JSON offset or the field name).
bool parse_profile(const std::string& json_text, DeviceProfile& out, std::string& err);
// Reads `spec`: a shipped profile's name (v100, a100, h100, h200, looked up
// in profiles_dir) or a path to a .json file.
bool load_profile(const std::string& spec, const std::string& profiles_dir, DeviceProfile& out,
                  std::string& err);

// The efficiency of op class `op` at `flops` (1 without a curve).
double efficiency(const DeviceProfile& p, const std::string& op, double flops);

// Roofline time of one kernel: max(flops / (peak(dtype) * efficiency),
// bytes / memory_bandwidth). An unknown dtype uses fp32's peak.
double compute_time(const DeviceProfile& p, const std::string& op, const std::string& dtype,
                    double flops, double bytes);

enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv };

// The link a group of devices communicates over: inter-node when its devices
// lie on more than one node (device id / devices_per_node), else intra-node.
const LinkCost& group_link(const DeviceProfile& p, const std::vector<int>& devices);

// Alpha-beta time of a collective on `devices`, with `bytes` the full buffer
// (allreduce: the buffer; allgather: the gathered result; reducescatter: the
// input; all-to-all: one member's whole send buffer; send/recv: the message).
// Ring allreduce: 2(n-1) messages of S/n: 2(n-1)a + 2(n-1)/n S/b.
// Allgather, reducescatter, all-to-all (pairwise): (n-1)a + (n-1)/n S/b.
// Send/recv: a + S/b. A group of one device costs nothing.
double collective_time(const DeviceProfile& p, Collective kind, double bytes,
                       const std::vector<int>& devices);

}  // namespace nns::planner
