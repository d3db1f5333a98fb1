#include "backend/planner/topology_comm.h"

#include <algorithm>
#include <map>

namespace nns::planner {

int devices_per_node_in_group(const DeviceProfile& p, const std::vector<int>& devices) {
  std::map<int, int> per_node;
  for (int d : devices) ++per_node[d / std::max(1, p.devices_per_node)];
  int fewest = 0;
  for (const auto& [node, n] : per_node) fewest = fewest == 0 ? n : std::min(fewest, n);
  return std::max(1, fewest);
}

double topology_collective_time(const DeviceProfile& p, Collective kind, double bytes, const std::vector<int>& devices) {
  const LinkCost& l = group_link(p, devices);
  bool ring = kind == Collective::AllReduce || kind == Collective::AllGather || kind == Collective::ReduceScatter;
  if (!ring || &l != &p.inter) return collective_time(p, kind, bytes, devices);
  const double n = static_cast<double>(devices.size());
  const int g = devices_per_node_in_group(p, devices);
  // g parallel ring channels, each carrying 1/g of the data over its own NIC.
  const double bw = std::min(p.intra.bandwidth, g * l.bandwidth);
  if (kind == Collective::AllReduce) return 2 * (n - 1) * l.latency + 2 * (n - 1) / n * bytes / bw;
  return (n - 1) * l.latency + (n - 1) / n * bytes / bw;
}

}  // namespace nns::planner
