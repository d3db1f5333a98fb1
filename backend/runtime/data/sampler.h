// The order in which a run reads a corpus's windows: a seeded permutation
// of all windows per epoch, a new one each epoch. A run numbers the
// samples it reads 0, 1, 2, ... (micro-batch by micro-batch, replicas
// interleaved as one device numbers them); sample j is window
// permutation(epoch = j / windows)[j % windows]. Each sample number is read
// by exactly one replica, so the replicas' shares are disjoint and no
// window is read twice within an epoch.
#pragma once

#include <cstdint>
#include <vector>

namespace nns::backend::data {

// Where a run stands in its data stream: what a checkpoint saves.
struct DataPosition {
  uint64_t seed = 0;
  int64_t windows = 0;  // windows per epoch
  int64_t epoch = 0;    // epochs completed
  int64_t index = 0;    // samples read in the current epoch
  int64_t samples() const { return epoch * windows + index; }
};

class WindowSampler {
 public:
  WindowSampler(int64_t windows, uint64_t seed);
  int64_t windows() const { return windows_; }
  uint64_t seed() const { return seed_; }
  // The window that sample number `sample` reads.
  int64_t window(int64_t sample);
  // The position after `samples` samples have been read.
  DataPosition position(int64_t samples) const;
  // Epoch `epoch`'s permutation of 0 .. windows-1 (Fisher-Yates driven by
  // a hash of seed and epoch: the same on every rank and every run).
  static std::vector<int64_t> permutation(int64_t windows, uint64_t seed, int64_t epoch);

 private:
  int64_t windows_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;  // the permutation of cached_epoch_
};

}  // namespace nns::backend::data
