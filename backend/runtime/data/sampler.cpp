#include "backend/runtime/data/sampler.h"

#include "backend/runtime/splitmix.h"

#include <stdexcept>
#include <utility>

namespace nns::backend::data {
namespace {

uint64_t hash64(uint64_t x) { return splitmix64(x); }

}  // namespace

WindowSampler::WindowSampler(int64_t windows, uint64_t seed) : windows_(windows), seed_(seed) {
  if (windows <= 0) throw std::invalid_argument("WindowSampler: no windows");
}

std::vector<int64_t> WindowSampler::permutation(int64_t windows, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(windows));
  for (int64_t i = 0; i < windows; ++i) order[static_cast<size_t>(i)] = i;
  const uint64_t key = hash64(seed ^ hash64(static_cast<uint64_t>(epoch) + 0x5151));
  for (int64_t i = windows - 1; i > 0; --i) {
    // Modulo bias is below 2^-40 for any corpus that fits a disk.
    int64_t j = static_cast<int64_t>(hash64(key ^ hash64(static_cast<uint64_t>(i))) % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

int64_t WindowSampler::window(int64_t sample) {
  const int64_t epoch = sample / windows_;
  if (epoch != cached_epoch_) {
    order_ = permutation(windows_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(sample % windows_)];
}

DataPosition WindowSampler::position(int64_t samples) const {
  return DataPosition{seed_, windows_, samples / windows_, samples % windows_};
}

}  // namespace nns::backend::data
