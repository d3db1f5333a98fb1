// nns profile's measurements and the device profile written from them
// (cost_model.h reads it back). The measuring itself needs the runtime and
// lives in library nns_profile_measure (measure/profile_measure.h); the
// calibration runs need the driver's pipeline and stay in driver/profile.cpp.
// This half is plain data and text, so it is the planner's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/planner/cost_model.h"
#include "backend/planner/program_cost.h"

namespace nns::planner {

using MeasuredPoints = std::vector<std::pair<double, double>>;  // (size, seconds)

struct ProfileSettings {
  bool quick = false;
  int threads = 1, ranks = 2;
};

struct CommPoints {
  std::map<std::string, MeasuredPoints> by_name;  // collective_name -> (bytes as collective_time takes them, seconds)
};

// One measured kernel: its class and work (program_cost's node_work, so the
// fit and the cost model count the same FLOPs) and its time.
struct KernelPoint {
  std::string kind;  // the node's kind (linear, gelu_backward, ...)
  NodeWork work;
  double seconds = 0;
};

struct CopyPoints {
  MeasuredPoints copy, accumulate, update;  // (bytes of the region / parameter piece, seconds)
  MeasuredPoints copy_cold, accumulate_cold;  // the same over a working set 8 x the L3 (data from memory)
  double instr = 0;                           // seconds per bookkeeping instruction (a Free)
};

// What the calibration program's runs measured (driver/profile.cpp).
struct InSitu {
  std::vector<std::string> configs;                  // calibration.nns's configs, shortest program first
  std::vector<double> instructions;                  // rank 0's program length per config
  std::map<std::string, std::vector<double>> extra;  // instr_name -> seconds per config
};

// The last-level cache of cpu0 (sysfs), 32 MiB when it cannot be read.
int64_t l3_cache_bytes();
// A figure as the profile writes it ("%.6g").
std::string profile_number(double v);
// The profile's JSON (without in_situ); "" with err set when a fit fails.
std::string build_profile(const ProfileSettings& s, const CommPoints& comm, const std::vector<KernelPoint>& kernels, double chain,
                          const CopyPoints& copies, std::string& err);
// The profile with the in-situ calibration appended.
std::string add_in_situ(const std::string& profile_json, const ProfileSettings& s, const InSitu& situ);
// The raw measurements, a few lines for the terminal.
std::string measurement_summary(const CommPoints& comm, const std::vector<KernelPoint>& kernels, const CopyPoints& copies);

}  // namespace nns::planner
