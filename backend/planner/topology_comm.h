// Collective time over a node topology (helper-megatron, issue 12): like
// collective_time (cost_model.h), but a ring that crosses nodes runs its
// inter-node hops over the NICs of all the group's devices on a node at
// once. On a DGX A100 each GPU has its own InfiniBand NIC (the a100
// profile's inter_bandwidth is one NIC), and NCCL builds one ring channel
// per NIC, so a ring allreduce, allgather or reduce-scatter over g devices
// per node moves its inter-node share at g x inter_bandwidth per node
// (no more than the intra-node bandwidth that feeds it). A group with one
// device per node (a data-parallel group of a TP x PP replica) is costed as
// collective_time does; all-to-all and send/recv use one NIC per device.
#pragma once

#include <vector>

#include "backend/planner/cost_model.h"

namespace nns::planner {

// Devices per node the group has on its least-populated node (1 when it
// lies on one node or spreads one device per node).
int devices_per_node_in_group(const DeviceProfile& p, const std::vector<int>& devices);

// collective_time with the inter-node ring bandwidth scaled as above.
double topology_collective_time(const DeviceProfile& p, Collective kind, double bytes, const std::vector<int>& devices);

}  // namespace nns::planner
