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
//
// A measured profile (`nns profile`, driver/profile.cpp: the CPU one in
// stdlib/profiles/cpu.json) adds what a runtime costs beyond the roofline:
// a fixed time per kernel launch, lines (overhead + bytes / bandwidth) for
// region copies, accumulations and optimizer updates, one alpha-beta link
// per collective algorithm, and efficiency curves per op class and for the
// backward kernels ("matmul_backward"). Each is optional: a profile without
// it (the GPU datasheet profiles) is costed as before.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nns::planner {

struct LinkCost {
  double bandwidth = 0;  // bytes per second, per direction
  double latency = 0;    // seconds per message
};

// A cost of the bytes moved: overhead + bytes / bandwidth, or, when the
// profile lists measured (bytes, seconds) points, those points joined by
// straight lines (below the first: the first's time; past the last: the
// last segment extended). Caches and the allocator make a CPU copy's cost
// piecewise: a line fitted through it misses the small sizes by 2-5x.
// Absent (bandwidth 0) unless the profile has it.
struct LineCost {
  double overhead = 0;   // seconds per call
  double bandwidth = 0;  // bytes per second
  std::vector<std::pair<double, double>> points;  // (bytes, seconds), ascending; optional
  bool present() const { return bandwidth > 0; }
  double time(double bytes) const;
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
  // Measured-profile fields (all optional; see the header comment).
  int threads = 0;             // kernel threads per rank the profile was measured with (0: not said)
  double instr_overhead = 0;   // seconds per instruction the runtime dispatches (copies: in their line)
  double kernel_overhead = 0;  // seconds per kernel node, on top of its roofline
  // Per efficiency curve (its key: "op:add", "elementwise", ...): that
  // curve's own fixed cost per node, replacing kernel_overhead for it.
  std::map<std::string, double> kernel_overheads;
  LineCost copy;               // a region copy (slice, extract, insert, zero fill): bytes = the region's
  LineCost accumulate;         // a region accumulation (b += a): bytes = the region's
  LineCost update;             // an optimizer update (AdamW): bytes = the parameter piece's
  // Measured inside running programs (nns profile's calibration runs,
  // driver/profile.cpp): per instruction kind (rank_program.h's
  // instr_name: "forward", "slice-in", "all-to-all", ...), the time a
  // program's instruction takes beyond what the fields above cost it, at
  // each of the calibration programs' lengths (in_situ_instructions,
  // ascending). A program's other instructions take the caches a
  // micro-benchmark keeps hot, the more the longer the program; a
  // collective pays its peer's lateness. Absent: no such term.
  std::vector<double> in_situ_instructions;
  std::map<std::string, std::vector<double>> in_situ_extra;
  // A program whose buffers together exceed `cache_bytes` (its share of the
  // last-level cache) streams them from memory: its copies and
  // accumulations follow these lines, and its kernels take at least their
  // bytes at memory_bandwidth_cold (absent: the lines above for every program).
  LineCost copy_cold, accumulate_cold;
  double memory_bandwidth_cold = 0;
  double cache_bytes = 0;
  // Per collective ("allreduce", "allgather", "reduce_scatter", "all_to_all",
  // "sendrecv"): the link its algorithm behaves as within a node; replaces
  // `intra` for that collective.
  std::map<std::string, LinkCost> collective_links;
  // Per collective, optionally: measured (bytes, seconds) points on a group
  // of `collective_ranks` devices in a node (bytes as collective_time takes
  // them), used instead of the link for groups of that size.
  std::map<std::string, LineCost> collective_curves;
  int collective_ranks = 0;
  // The replicas' gradient buckets of the training stack the profile
  // describes (optional "gradient_buckets": {"elements": E,
  // "per_replica": R}): max(E, R x replicas) gradient elements per bucket,
  // as Megatron-LM's DDP cuts them. Absent (0): the lowering's own rule
  // (backend::replica_bucket_bytes, made for CPU ranks).
  double bucket_elements = 0, bucket_elements_per_replica = 0;
};

// The bucket size in bytes (fp32 gradients) `p` gives `replicas` replicas;
// 0 when the profile says nothing (the lowering's rule applies).
size_t profile_bucket_bytes(const DeviceProfile& p, int replicas);

// Reads a profile from JSON text; on error returns false with err set
// (what is wrong, with the JSON offset or the field name).
bool parse_profile(const std::string& json_text, DeviceProfile& out, std::string& err);
// Reads `spec`: a shipped profile's name (looked up in profiles_dir; see
// profiles.h) or a path to a .json file.
bool load_profile(const std::string& spec, const std::string& profiles_dir, DeviceProfile& out,
                  std::string& err);

// The efficiency of op class `op` at `flops` (1 without a curve). A class
// the profile has no curve for falls back: "X_backward" to "X", "attention"
// (batched matmul) to "matmul".
double efficiency(const DeviceProfile& p, const std::string& op, double flops);

// The fixed cost per node of efficiency curve `curve`: its
// kernel_overheads entry, following efficiency()'s fallbacks, else
// kernel_overhead.
double kernel_overhead_for(const DeviceProfile& p, const std::string& curve);

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
// A collective with an entry in p.collective_links uses that link inside a node.
double collective_time(const DeviceProfile& p, Collective kind, double bytes,
                       const std::vector<int>& devices);
const char* collective_name(Collective kind);  // "allreduce", ..., "sendrecv"

// The in_situ extra of instruction kind `kind` in a program of
// `instructions` instructions: interpolated in log(instructions) between
// the calibration lengths, the nearest one's outside them; 0 when the
// profile has none for the kind.
double in_situ_extra(const DeviceProfile& p, const std::string& kind, double instructions);

// ---- fitting measurements (nns profile) ----

// A robust line t = overhead + bytes / bandwidth through (bytes, seconds)
// points (Theil-Sen: the median pairwise slope, then the median intercept;
// exact for points on a line, unmoved by a minority of outliers). A
// negative slope is taken as 0 (bandwidth 1e30: all overhead), a negative
// intercept as 0 (the line through the origin). Needs two points of
// distinct size; false otherwise.
bool fit_line(const std::vector<std::pair<double, double>>& points, LineCost& out);

// The alpha-beta link of `kind` on a group of n devices from measured
// (bytes, seconds) points, bytes as collective_time takes them: the fitted
// line's intercept and slope divided by the algorithm's message count and
// volume factor.
bool fit_collective(Collective kind, int n, const std::vector<std::pair<double, double>>& points, LinkCost& out);

// Measured (size, seconds) points sorted by size with each time lowered to
// the least time at any larger size: a cost does not fall as the size
// grows, so a time above a larger size's is noise (the process was
// preempted, a page was faulted in) and only ever adds.
std::vector<std::pair<double, double>> lower_envelope(std::vector<std::pair<double, double>> points);

// Efficiency points of one op class from measured (flops, seconds) kernels:
// eff = flops / (peak * (t - kernel_overhead)), the time above the overhead
// floored at a tenth of t; sorted by flops, repeated flops averaged.
std::vector<std::pair<double, double>> fit_efficiency(const std::vector<std::pair<double, double>>& points, double peak,
                                                      double kernel_overhead);

}  // namespace nns::planner
